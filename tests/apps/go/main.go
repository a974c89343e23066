// qs_gopool: a Go net/http server for qscope's Go carrier tests (tests/integration/go_test.cpp).
// Standard library only.
//
//	qs_gopool -port P -admin-port A -mode pool -downstream 127.0.0.1:D -pool 4
//	qs_gopool -port P -admin-port A -mode cpu -work N
//
// pool: every request borrows one of -pool persistent connections to a line-echo downstream
// (qs_downstream), writes "x\n" and reads one line back. A borrower with no free connection
// waits in acquireConn, a goroutine parked on a channel: no OS thread waits for it.
// cpu: every request runs N rounds of SHA-256 over 4 KiB on the CPU.
//
// The admin port serves the program's own counters (/counters, JSON) and net/http/pprof's
// goroutine profile (/debug/pprof/goroutine?debug=1). Prints "READY port=P unanswered=0xADDR"
// once both listen.
package main

import (
	"bufio"
	"crypto/sha256"
	"encoding/json"
	"flag"
	"fmt"
	"log"
	"net"
	"net/http"
	_ "net/http/pprof"
	"os"
	"runtime"
	"sync/atomic"
)

var (
	inFlight   atomic.Int64 // handler entered, response not yet written
	unanswered atomic.Int64 // a request's first byte read off its connection, its response not yet written
	waiting    atomic.Int64 // in acquireConn, no connection yet
	busy       atomic.Int64 // holding a pool connection
	computing  atomic.Int64 // in the CPU loop
	completed  atomic.Int64
	poolErrors atomic.Int64
)

type pooledConn struct {
	c net.Conn
	r *bufio.Reader
}

var pool chan *pooledConn

// acquireConn is the pool's wait: the tests count goroutines whose stack holds it.
//
//go:noinline
func acquireConn() *pooledConn {
	waiting.Add(1)
	c := <-pool
	waiting.Add(-1)
	busy.Add(1)
	return c
}

func releaseConn(c *pooledConn) {
	busy.Add(-1)
	pool <- c
}

func poolHandler(w http.ResponseWriter, _ *http.Request) {
	inFlight.Add(1)
	c := acquireConn()
	_, err := c.c.Write([]byte("x\n"))
	if err == nil {
		_, err = c.r.ReadString('\n')
	}
	releaseConn(c)
	if err != nil {
		poolErrors.Add(1)
		w.WriteHeader(http.StatusBadGateway)
	}
	w.Write([]byte("ok"))
	completed.Add(1)
	inFlight.Add(-1)
}

var work int

func cpuHandler(w http.ResponseWriter, _ *http.Request) {
	inFlight.Add(1)
	computing.Add(1)
	buf := make([]byte, 4096)
	for i := 0; i < work; i++ {
		sum := sha256.Sum256(buf)
		buf[i%len(buf)] ^= sum[0]
	}
	computing.Add(-1)
	w.Write([]byte("ok"))
	completed.Add(1)
	inFlight.Add(-1)
}

// countingListener's connections keep unanswered, the span qscope calls in flight, at the
// reads and writes themselves. The handler's own count (inFlight) misses what happens before
// and after it, where goroutines wait for a P: net/http's background reader takes the next
// request's first byte while the previous one finishes, then the request is parsed; the
// response is written after the handler returns.
type countingListener struct{ net.Listener }

func (l countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &countingConn{Conn: c}, nil
}

type countingConn struct {
	net.Conn
	open atomic.Bool // read from since the last write
}

func (c *countingConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if n > 0 && c.open.CompareAndSwap(false, true) {
		unanswered.Add(1)
	}
	return n, err
}

func (c *countingConn) Write(p []byte) (int, error) {
	n, err := c.Conn.Write(p)
	if n > 0 && c.open.CompareAndSwap(true, false) {
		unanswered.Add(-1)
	}
	return n, err
}

func (c *countingConn) Close() error {
	if c.open.CompareAndSwap(true, false) {
		unanswered.Add(-1)
	}
	return c.Conn.Close()
}

func counters(w http.ResponseWriter, _ *http.Request) {
	json.NewEncoder(w).Encode(map[string]int64{
		"in_flight":   inFlight.Load(),
		"unanswered":  unanswered.Load(),
		"waiting":     waiting.Load(),
		"busy":        busy.Load(),
		"computing":   computing.Load(),
		"completed":   completed.Load(),
		"pool_errors": poolErrors.Load(),
		"gomaxprocs":  int64(runtime.GOMAXPROCS(0)),
		"goroutines":  int64(runtime.NumGoroutine()),
	})
}

func main() {
	port := flag.Int("port", 0, "service port")
	adminPort := flag.Int("admin-port", 0, "counters and pprof port")
	mode := flag.String("mode", "pool", "pool or cpu")
	downstream := flag.String("downstream", "", "HOST:PORT of the pool's peer")
	size := flag.Int("pool", 4, "pool connections")
	flag.IntVar(&work, "work", 2000, "cpu mode: SHA-256 rounds per request")
	flag.Parse()

	mux := http.NewServeMux()
	switch *mode {
	case "pool":
		pool = make(chan *pooledConn, *size)
		for i := 0; i < *size; i++ {
			c, err := net.Dial("tcp", *downstream)
			if err != nil {
				log.Fatalf("downstream %s: %v", *downstream, err)
			}
			pool <- &pooledConn{c, bufio.NewReader(c)}
		}
		mux.HandleFunc("/", poolHandler)
	case "cpu":
		mux.HandleFunc("/", cpuHandler)
	default:
		fmt.Fprintln(os.Stderr, "-mode: pool or cpu")
		os.Exit(2)
	}
	ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", *port))
	if err != nil {
		log.Fatal(err)
	}
	admin, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", *adminPort))
	if err != nil {
		log.Fatal(err)
	}
	http.HandleFunc("/counters", counters) // DefaultServeMux also holds /debug/pprof/
	go func() { log.Fatal(http.Serve(admin, nil)) }()
	// The counter's address, so a test can read it from /proc/PID/mem at any moment: the admin
	// endpoint answers only when a goroutine gets one of the busy Ps. An atomic.Int64's value
	// is its first 8 bytes; package variables never move.
	fmt.Printf("READY port=%d unanswered=%p\n", ln.Addr().(*net.TCPAddr).Port, &unanswered)
	os.Stdout.Sync()
	log.Fatal(http.Serve(countingListener{ln}, mux))
}
