// qs_tokio: the Tokio tests' HTTP/1.1 server (tests/integration/tokio_test.cpp). Its handlers
// await a timer (/sleep: the request is held by the runtime with no thread), block the worker
// that runs them (/block: a sleep on the runtime's thread, the classic mistake; /spin: CPU),
// or hand a blocking job to Tokio's blocking pool (/pool), or compute holding a
// std::sync::Mutex that every /lock handler takes (/lock: the worker of the next one blocks on
// it in futex, where an idle worker parks too). Its own counts are the oracle: a
// plain thread, outside the runtime, writes how many handlers are in each state to the
// counters file every 10 ms, as JSON.
//
// Usage: qs_tokio PORT WORKERS [COUNTERS_FILE]    (WORKERS 0: a current-thread runtime)
use std::sync::atomic::{AtomicI64, Ordering::Relaxed};
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

static IN_FLIGHT: AtomicI64 = AtomicI64::new(0); // read, and not yet answered
static SLEEPING: AtomicI64 = AtomicI64::new(0); // awaiting their timer
static BLOCKING: AtomicI64 = AtomicI64::new(0); // blocking their worker in a sleep
static IN_POOL: AtomicI64 = AtomicI64::new(0); // their job running on the blocking pool
static LOCK_WAITING: AtomicI64 = AtomicI64::new(0); // blocking their worker until LOCK is theirs
static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
static COMPLETED: AtomicI64 = AtomicI64::new(0);

fn param(path: &str, key: &str) -> u64 {
    path.split(|c| c == '?' || c == '&')
        .find_map(|kv| kv.strip_prefix(key).and_then(|v| v.strip_prefix('=')))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

// Counts a handler in one state for as long as it lives.
struct In(&'static AtomicI64);
impl In {
    fn new(c: &'static AtomicI64) -> In {
        c.fetch_add(1, Relaxed);
        In(c)
    }
}
impl Drop for In {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Relaxed);
    }
}

fn spin(d: Duration) {
    let end = Instant::now() + d;
    while Instant::now() < end {
        std::hint::spin_loop();
    }
}

async fn handle(path: &str) {
    let ms = Duration::from_millis(param(path, "ms"));
    if path.starts_with("/sleep") {
        let _s = In::new(&SLEEPING);
        tokio::time::sleep(ms).await;
    } else if path.starts_with("/block") {
        let _s = In::new(&BLOCKING);
        std::thread::sleep(ms);
    } else if path.starts_with("/spin") {
        spin(ms);
    } else if path.starts_with("/lock") {
        let waiting = In::new(&LOCK_WAITING);
        let _held = LOCK.lock().unwrap();
        drop(waiting);
        spin(ms);
    } else if path.starts_with("/pool") {
        let _s = In::new(&IN_POOL);
        let _ = tokio::task::spawn_blocking(move || std::thread::sleep(ms)).await;
    }
}

async fn serve(mut sock: TcpStream) {
    let mut buf = Vec::with_capacity(4096);
    let mut chunk = [0u8; 4096];
    loop {
        let end = loop {
            if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                break i + 4;
            }
            match sock.read(&mut chunk).await {
                Ok(0) | Err(_) => return,
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
            }
        };
        let head = String::from_utf8_lossy(&buf[..end]).to_string();
        buf.drain(..end);
        let path = head.split_whitespace().nth(1).unwrap_or("/").to_string();
        {
            let _f = In::new(&IN_FLIGHT);
            handle(&path).await;
            let resp = "HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nok\n";
            if sock.write_all(resp.as_bytes()).await.is_err() {
                return;
            }
        }
        COMPLETED.fetch_add(1, Relaxed);
    }
}

fn write_counters(path: String) {
    let tmp = format!("{}.tmp", path);
    loop {
        let s = format!(
            "{{\"in_flight\":{},\"sleeping\":{},\"blocking\":{},\"in_pool\":{},\"lock_waiting\":{},\"completed\":{}}}\n",
            IN_FLIGHT.load(Relaxed),
            SLEEPING.load(Relaxed),
            BLOCKING.load(Relaxed),
            IN_POOL.load(Relaxed),
            LOCK_WAITING.load(Relaxed),
            COMPLETED.load(Relaxed)
        );
        if std::fs::write(&tmp, s).is_ok() {
            let _ = std::fs::rename(&tmp, &path);
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.len() < 3 {
        eprintln!("usage: qs_tokio PORT WORKERS [COUNTERS_FILE]");
        std::process::exit(2);
    }
    let port: u16 = args[1].parse().expect("PORT");
    let workers: usize = args[2].parse().expect("WORKERS");
    if let Some(path) = args.get(3).cloned() {
        std::thread::Builder::new().name("qs-counters".into()).spawn(move || write_counters(path)).unwrap();
    }
    // WORKERS 0: a current-thread runtime, main's own loop.
    let rt = if workers == 0 {
        tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap()
    } else {
        let mut b = tokio::runtime::Builder::new_multi_thread();
        b.worker_threads(workers).enable_all();
        // QS_TOKIO_THREAD_NAME=api: the program names its threads api-0, api-1, ... (workers
        // and blocking pool alike, as Tokio does with any name).
        if let Ok(name) = std::env::var("QS_TOKIO_THREAD_NAME") {
            let next = std::sync::atomic::AtomicUsize::new(0);
            b.thread_name_fn(move || format!("{}-{}", name, next.fetch_add(1, Relaxed)));
        }
        b.build().unwrap()
    };
    rt.block_on(async move {
        let l = TcpListener::bind(("127.0.0.1", port)).await.expect("bind");
        loop {
            if let Ok((s, _)) = l.accept().await {
                tokio::spawn(serve(s));
            }
        }
    });
}
