// The service of issue 7's story: embedded Tomcat 10.1 in front of a 10-connection HikariCP
// pool to PostgreSQL, plus a call to a partner API that may never answer.
//
// Profiles (-Dqs.profile):
//   platform  Tomcat's default NIO connector, 200 platform worker threads
//   virtual   Tomcat's virtual-thread executor (useVirtualThreads): no admission limit
//   gated     virtual threads + Semaphore(qs.gate) in front of the pool; tryAcquire fails → 503
//   ceiling   virtual threads, maxConnections qs.maxConnections (100) and acceptCount
//             qs.acceptCount (50), keep-alive without a request limit: the connection cap is
//             the first limit left at the door
//
// Endpoints: /ping (at once), /db (borrow, select pg_sleep(0.05), return), /quote (HTTP GET
// to the partner with no read timeout), /retry (issue 20's retry amplification: three nested
// layers that each retry up to qs.retryAttempts (3) times, so a failing partner
// (qs.retryPartner) gets 3 × 3 × 3 = 27 calls per inbound request). A failed pool borrow or a
// full gate answers 503; so does /retry when every attempt failed. /partner-call (issue 20's
// fleet story) sends one line ("q\n") on a plain socket to qs.partner, a line-based partner
// (qs_downstream), and reads its one-line answer on the request thread, behind a per-instance
// limit: a Semaphore(qs.partnerLimit) acquired blocking (0, the default: no limit). Each
// instance keeps to its own limit; the partner sees the sum over instances.
// -Dqs.pg=none starts without PostgreSQL (no pool, no /db): HikariCP opens its connections at
// start and fails when there is no server, and the /retry story needs none.
//
// The app publishes its own counters (an oracle for the tests) by rewriting a small JSON file
// every 250 ms rather than on an HTTP port: with every worker stuck, an HTTP stats endpoint
// would go dark exactly when it is needed, and it would add traffic qscope would count.
package qscope.scenario;

import com.zaxxer.hikari.HikariConfig;
import com.zaxxer.hikari.HikariDataSource;
import jakarta.servlet.http.HttpServlet;
import jakarta.servlet.http.HttpServletRequest;
import jakarta.servlet.http.HttpServletResponse;
import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.net.HttpURLConnection;
import java.net.InetSocketAddress;
import java.net.Proxy;
import java.net.Socket;
import java.net.URI;
import java.net.URL;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardCopyOption;
import java.sql.Connection;
import java.sql.SQLException;
import java.sql.Statement;
import java.util.stream.Stream;
import java.util.Comparator;
import java.util.concurrent.ConcurrentSkipListMap;
import java.util.concurrent.Executors;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.Semaphore;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;
import org.apache.catalina.Lifecycle;
import org.apache.catalina.connector.Connector;
import org.apache.catalina.core.StandardContext;
import org.apache.catalina.startup.Tomcat;

public final class ScenarioApp {
    static String prop(String k, String def) {
        String v = System.getProperty(k);
        return v == null || v.isEmpty() ? def : v;
    }

    static void deleteTree(Path root) {
        try (Stream<Path> paths = Files.walk(root)) {
            paths.sorted(Comparator.reverseOrder()).forEach(p -> p.toFile().delete());
        } catch (IOException e) {
            // best effort, at exit
        }
    }

    static int intProp(String k, int def) {
        String v = prop(k, Integer.toString(def));
        try {
            return Integer.parseInt(v);
        } catch (NumberFormatException e) {
            throw new IllegalArgumentException("bad integer for -D" + k + ": '" + v + "'");
        }
    }

    // Counters the tests read back. Cumulative since start; *_now are gauges.
    static final class Stats {
        final AtomicLong dbStarted = new AtomicLong(), dbOk = new AtomicLong(),
                dbPoolTimeout = new AtomicLong(), dbPoolTimeoutMs = new AtomicLong(), dbGateRejected = new AtomicLong(),
                dbOtherError = new AtomicLong(), dbNow = new AtomicLong(), dbBorrowing = new AtomicLong(),
                dbQuerying = new AtomicLong(), quoteStarted = new AtomicLong(), quoteDone = new AtomicLong(),
                quoteNow = new AtomicLong(), pings = new AtomicLong();
        // /retry: inbound requests, calls to the partner (leaf_calls), those among them that
        // follow a failed call in the same request (leaf_retries: 26 of 27 when all fail), and
        // how the requests were answered (failed: 503 after every attempt failed; ok: 200).
        final AtomicLong retryRequests = new AtomicLong(), retryLeafCalls = new AtomicLong(),
                retryLeafRetries = new AtomicLong(), retryFailed = new AtomicLong(), retryOk = new AtomicLong();
        final AtomicLong dbNowMax = new AtomicLong(), dbQueryingMax = new AtomicLong();
        // /partner-call: calls to the line partner in progress (a permit held, from the line
        // written to its answer read), requests waiting for a permit, and their maxima.
        final AtomicLong partnerStarted = new AtomicLong(), partnerDone = new AtomicLong(),
                partnerFailed = new AtomicLong(), partnerNow = new AtomicLong(), partnerNowMax = new AtomicLong(),
                partnerWaiting = new AtomicLong(), partnerWaitingMax = new AtomicLong();
        volatile int partnerLimit;
        // start time (ms) of each /quote call still waiting → oldest in progress
        final ConcurrentSkipListMap<Long, Long> quoteStarts = new ConcurrentSkipListMap<>();
        final AtomicLong quoteSeq = new AtomicLong();
        // The connector's own count of open connections (its LimitLatch), once started.
        volatile java.util.function.LongSupplier connections = () -> -1;

        static void max(AtomicLong m, long v) {
            long cur;
            while (v > (cur = m.get()) && !m.compareAndSet(cur, v)) {}
        }

        String json(String profile, long pid) {
            long now = System.currentTimeMillis();
            var first = quoteStarts.firstEntry();
            double oldestQuote = first == null ? 0 : (now - first.getValue()) / 1000.0;
            return String.format(
                    "{\"profile\":\"%s\",\"pid\":%d,\"time_ms\":%d,\"ping\":%d,"
                            + "\"db\":{\"started\":%d,\"ok\":%d,\"pool_timeout\":%d,\"pool_timeout_ms\":%d,"
                            + "\"gate_rejected\":%d,"
                            + "\"other_error\":%d,\"in_progress\":%d,\"in_progress_max\":%d,\"borrowing\":%d,"
                            + "\"querying\":%d,\"querying_max\":%d},"
                            + "\"quote\":{\"started\":%d,\"done\":%d,\"in_progress\":%d,\"oldest_seconds\":%.3f},"
                            + "\"retry\":{\"requests\":%d,\"leaf_calls\":%d,\"leaf_retries\":%d,\"failed\":%d,"
                            + "\"ok\":%d},"
                            + "\"partner\":{\"limit\":%d,\"started\":%d,\"done\":%d,\"failed\":%d,"
                            + "\"in_progress\":%d,\"in_progress_max\":%d,\"waiting\":%d,\"waiting_max\":%d},"
                            + "\"connections\":%d}\n",
                    profile, pid, now, pings.get(), dbStarted.get(), dbOk.get(), dbPoolTimeout.get(),
                    dbPoolTimeoutMs.get(), dbGateRejected.get(), dbOtherError.get(), dbNow.get(), dbNowMax.get(), dbBorrowing.get(),
                    dbQuerying.get(), dbQueryingMax.get(), quoteStarted.get(), quoteDone.get(), quoteNow.get(),
                    oldestQuote, retryRequests.get(), retryLeafCalls.get(), retryLeafRetries.get(),
                    retryFailed.get(), retryOk.get(), partnerLimit, partnerStarted.get(), partnerDone.get(),
                    partnerFailed.get(), partnerNow.get(), partnerNowMax.get(), partnerWaiting.get(),
                    partnerWaitingMax.get(), connections.getAsLong());
        }
    }

    static final Stats STATS = new Stats();

    static void text(HttpServletResponse resp, int status, String body) throws IOException {
        resp.setStatus(status);
        resp.setContentType("text/plain");
        byte[] b = body.getBytes(StandardCharsets.UTF_8);
        resp.setContentLength(b.length);
        resp.getOutputStream().write(b);
    }

    static final class PingServlet extends HttpServlet {
        @Override
        protected void doGet(HttpServletRequest req, HttpServletResponse resp) throws IOException {
            STATS.pings.incrementAndGet();
            text(resp, 200, "pong\n");
        }
    }

    static final class DbServlet extends HttpServlet {
        final HikariDataSource ds;
        final Semaphore gate;  // null: no admission limit in front of the pool

        DbServlet(HikariDataSource ds, Semaphore gate) {
            this.ds = ds;
            this.gate = gate;
        }

        @Override
        protected void doGet(HttpServletRequest req, HttpServletResponse resp) throws IOException {
            STATS.dbStarted.incrementAndGet();
            if (gate != null && !gate.tryAcquire()) {
                // Reject at the door: the client learns at once instead of after the pool timeout.
                STATS.dbGateRejected.incrementAndGet();
                text(resp, 503, "busy: gate full\n");
                return;
            }
            Stats.max(STATS.dbNowMax, STATS.dbNow.incrementAndGet());
            try {
                query(resp);
            } finally {
                STATS.dbNow.decrementAndGet();
                if (gate != null) gate.release();
            }
        }

        void query(HttpServletResponse resp) throws IOException {
            Connection c;
            STATS.dbBorrowing.incrementAndGet();
            long borrowStart = System.nanoTime();
            try {
                c = ds.getConnection();
            } catch (SQLException e) {
                // HikariCP throws SQLTransientConnectionException after connectionTimeout.
                // The time waited is summed so that a test has the 503s' latency without
                // having to catch one with a probe (the probes' luck varies with the waves).
                STATS.dbPoolTimeoutMs.addAndGet((System.nanoTime() - borrowStart) / 1_000_000);
                STATS.dbPoolTimeout.incrementAndGet();
                text(resp, 503, "pool timeout: " + e.getMessage() + "\n");
                return;
            } finally {
                STATS.dbBorrowing.decrementAndGet();
            }
            Stats.max(STATS.dbQueryingMax, STATS.dbQuerying.incrementAndGet());
            try (c; Statement s = c.createStatement()) {
                s.execute("select pg_sleep(0.05)");
                STATS.dbOk.incrementAndGet();
                text(resp, 200, "ok\n");
            } catch (SQLException e) {
                STATS.dbOtherError.incrementAndGet();
                text(resp, 500, "db error: " + e.getMessage() + "\n");
            } finally {
                STATS.dbQuerying.decrementAndGet();
            }
        }
    }

    static final class QuoteServlet extends HttpServlet {
        final URI partner;

        QuoteServlet(String hostPort) {
            this.partner = URI.create("http://" + hostPort + "/quote");
        }

        @Override
        protected void doGet(HttpServletRequest req, HttpServletResponse resp) throws IOException {
            long id = STATS.quoteSeq.incrementAndGet();
            STATS.quoteStarts.put(id, System.currentTimeMillis());
            STATS.quoteStarted.incrementAndGet();
            STATS.quoteNow.incrementAndGet();
            try {
                HttpURLConnection c = (HttpURLConnection) partner.toURL().openConnection();
                // The defect under study: HttpURLConnection's read timeout defaults to 0 (wait
                // forever) and nobody set one.
                try (InputStream in = c.getInputStream()) {
                    byte[] body = in.readAllBytes();
                    text(resp, 200, new String(body, StandardCharsets.UTF_8));
                }
            } catch (IOException e) {
                text(resp, 502, "partner: " + e + "\n");
            } finally {
                STATS.quoteStarts.remove(id);
                STATS.quoteNow.decrementAndGet();
                STATS.quoteDone.incrementAndGet();
            }
        }
    }

    // Issue 20: retry amplification. Three layers, as in a service whose handler calls a
    // client library that calls an adapter, each of which retries on its own: a partner that
    // fails every call gets attempts³ calls per inbound request. Plain loops on the request
    // thread, so every call to the partner is made (and waited for) by the thread that read
    // the inbound request, as a blocking client does.
    static final class RetryServlet extends HttpServlet {
        final URL leaf;
        final int attempts;

        RetryServlet(String hostPort, int attempts) throws IOException {
            this.leaf = URI.create("http://" + hostPort + "/fail").toURL();
            this.attempts = attempts;
        }

        // One inbound request's calls, for leaf_retries: a call after a failed call is a retry.
        static final class Calls {
            boolean lastFailed;
        }

        @Override
        protected void doGet(HttpServletRequest req, HttpServletResponse resp) throws IOException {
            STATS.retryRequests.incrementAndGet();
            Calls calls = new Calls();
            boolean ok = false;
            for (int i = 0; i < attempts && !ok; i++) ok = layer(calls);
            if (ok) {
                STATS.retryOk.incrementAndGet();
                text(resp, 200, "ok\n");
            } else {
                STATS.retryFailed.incrementAndGet();
                text(resp, 503, "retries exhausted\n");
            }
        }

        boolean layer(Calls calls) {
            for (int i = 0; i < attempts; i++)
                if (adapter(calls)) return true;
            return false;
        }

        boolean adapter(Calls calls) {
            for (int i = 0; i < attempts; i++)
                if (call(calls)) return true;
            return false;
        }

        // One blocking GET on this thread (java.net.http.HttpClient would do its I/O on its
        // own selector thread). Failure: no answer (IOException, e.g. a timeout), 5xx or 429.
        boolean call(Calls calls) {
            STATS.retryLeafCalls.incrementAndGet();
            if (calls.lastFailed) STATS.retryLeafRetries.incrementAndGet();
            boolean ok;
            HttpURLConnection c = null;
            try {
                c = (HttpURLConnection) leaf.openConnection(Proxy.NO_PROXY);
                c.setConnectTimeout(1000);
                c.setReadTimeout(2000);
                int status = c.getResponseCode();
                ok = status < 500 && status != 429;
                // Read the body to its end and close it: only then does HttpURLConnection put
                // the connection back in its keep-alive cache, so calls reuse connections as a
                // pooled client would instead of opening one per call.
                InputStream in = status >= 400 ? c.getErrorStream() : c.getInputStream();
                if (in != null) {
                    try (in) {
                        in.readAllBytes();
                    }
                }
            } catch (IOException e) {
                ok = false;
                if (c != null) c.disconnect();  // the connection's state is unknown: never reuse it
            }
            calls.lastFailed = !ok;
            return ok;
        }
    }

    // Issue 20's fleet story: each instance limits its own concurrent calls to one partner
    // (a Semaphore per JVM, blocking acquire, as a client library's per-instance limit does);
    // with N instances the partner gets N times the limit. The partner is line-based
    // (qs_downstream: "q\n" in, "y\n" out after its delay), so the call is a plain socket on
    // the request thread: connect, write one line, read one line, close.
    static final class PartnerCallServlet extends HttpServlet {
        final InetSocketAddress partner;
        final Semaphore limit;  // null: no limit

        PartnerCallServlet(String hostPort, int limit) {
            int i = hostPort.lastIndexOf(':');
            this.partner = new InetSocketAddress(hostPort.substring(0, i), Integer.parseInt(hostPort.substring(i + 1)));
            this.limit = limit > 0 ? new Semaphore(limit) : null;
        }

        @Override
        protected void doGet(HttpServletRequest req, HttpServletResponse resp) throws IOException {
            if (limit != null) {
                Stats.max(STATS.partnerWaitingMax, STATS.partnerWaiting.incrementAndGet());
                try {
                    limit.acquire();
                } catch (InterruptedException e) {
                    Thread.currentThread().interrupt();
                    text(resp, 503, "interrupted waiting for a permit\n");
                    return;
                } finally {
                    STATS.partnerWaiting.decrementAndGet();
                }
            }
            STATS.partnerStarted.incrementAndGet();
            Stats.max(STATS.partnerNowMax, STATS.partnerNow.incrementAndGet());
            try (Socket s = new Socket()) {
                s.setTcpNoDelay(true);
                s.connect(partner, 1000);
                s.setSoTimeout(10000);
                OutputStream o = s.getOutputStream();
                o.write('q');
                o.write('\n');
                o.flush();
                InputStream in = s.getInputStream();
                StringBuilder line = new StringBuilder();
                for (int c; (c = in.read()) != -1 && c != '\n';) line.append((char) c);
                if (!"y".contentEquals(line)) throw new IOException("partner answered '" + line + "'");
                text(resp, 200, "y\n");
            } catch (IOException e) {
                STATS.partnerFailed.incrementAndGet();
                text(resp, 502, "partner: " + e + "\n");
            } finally {
                STATS.partnerNow.decrementAndGet();
                STATS.partnerDone.incrementAndGet();
                if (limit != null) limit.release();
            }
        }
    }

    public static void main(String[] args) throws Exception {
        String profile = prop("qs.profile", args.length > 0 ? args[0] : "platform");
        if (!java.util.Set.of("platform", "virtual", "gated", "ceiling").contains(profile)) {
            System.err.println("scenario app: unknown profile '" + profile + "' (platform, virtual, gated, ceiling)");
            System.exit(2);
        }
        int port = intProp("qs.port", 23080);
        String pg = prop("qs.pg", "127.0.0.1:23432");
        String partner = prop("qs.partner", "127.0.0.1:23090");
        int poolSize = intProp("qs.pool", 10);
        int poolTimeoutMs = intProp("qs.poolTimeoutMs", 3000);
        int gateSize = intProp("qs.gate", 10);
        int maxThreads = intProp("qs.maxThreads", 200);
        String retryPartner = prop("qs.retryPartner", "127.0.0.1:23091");
        int retryAttempts = intProp("qs.retryAttempts", 3);
        int partnerLimit = intProp("qs.partnerLimit", 0);
        STATS.partnerLimit = partnerLimit;
        String statsFile = prop("qs.stats", "");
        String baseDir = prop("qs.baseDir", "");
        if (baseDir.isEmpty()) {
            // Tomcat's work files, removed when the JVM ends (SIGTERM runs the hook).
            Path tmp = Files.createTempDirectory("qs-tomcat");
            baseDir = tmp.toString();
            Runtime.getRuntime().addShutdownHook(new Thread(() -> deleteTree(tmp)));
        }

        // HttpURLConnection keeps at most http.maxConnections (default 5) idle connections per
        // partner: with more concurrent /retry requests than that, the rest would be closed
        // after each call and reopened for the next, thousands of connections a second (and as
        // many TIME_WAIT sockets) instead of one per request in progress.
        if (System.getProperty("http.maxConnections") == null) System.setProperty("http.maxConnections", "256");

        HikariDataSource ds = null;
        if (!pg.equals("none")) {
            HikariConfig hc = new HikariConfig();
            hc.setJdbcUrl("jdbc:postgresql://" + pg + "/postgres?ApplicationName=qscope-scenario");
            hc.setUsername(prop("qs.pgUser", "postgres"));
            hc.setMaximumPoolSize(poolSize);
            hc.setMinimumIdle(poolSize);  // fixed-size pool, all connections open before load
            hc.setConnectionTimeout(poolTimeoutMs);
            ds = new HikariDataSource(hc);
        }

        Tomcat tomcat = new Tomcat();
        tomcat.setBaseDir(baseDir);
        Connector conn = new Connector("org.apache.coyote.http11.Http11NioProtocol");
        conn.setPort(port);
        conn.setProperty("address", prop("qs.addr", "127.0.0.1"));
        conn.setProperty("maxThreads", Integer.toString(maxThreads));
        if (!profile.equals("platform")) {
            // Tomcat 10.1.x: the endpoint then runs each request on a new virtual thread
            // (org.apache.tomcat.util.threads.VirtualThreadExecutor); maxThreads no longer applies.
            if (!conn.setProperty("useVirtualThreads", "true"))
                throw new IllegalStateException("this Tomcat has no useVirtualThreads");
        }
        if (profile.equals("ceiling")) {
            conn.setProperty("maxConnections", Integer.toString(intProp("qs.maxConnections", 100)));
            conn.setProperty("acceptCount", Integer.toString(intProp("qs.acceptCount", 50)));
            conn.setProperty("maxKeepAliveRequests", "-1");  // connections stay open: a plateau, not churn
        }
        tomcat.setConnector(conn);

        // Tomcat.addContext's FixContextListener scans servlet annotations, which needs
        // jakarta.annotation (not in Debian's embed jars): configure the context by hand.
        StandardContext ctx = new StandardContext();
        ctx.setName("");
        ctx.setPath("");
        ctx.addLifecycleListener(ev -> {
            if (Lifecycle.CONFIGURE_START_EVENT.equals(ev.getType())) ctx.setConfigured(true);
        });
        tomcat.getHost().addChild(ctx);
        Tomcat.addServlet(ctx, "ping", new PingServlet());
        ctx.addServletMappingDecoded("/ping", "ping");
        if (ds != null) {
            Tomcat.addServlet(ctx, "db", new DbServlet(ds, profile.equals("gated") ? new Semaphore(gateSize) : null));
            ctx.addServletMappingDecoded("/db", "db");
        }
        Tomcat.addServlet(ctx, "quote", new QuoteServlet(partner));
        ctx.addServletMappingDecoded("/quote", "quote");
        Tomcat.addServlet(ctx, "retry", new RetryServlet(retryPartner, retryAttempts));
        ctx.addServletMappingDecoded("/retry", "retry");
        Tomcat.addServlet(ctx, "partner-call", new PartnerCallServlet(partner, partnerLimit));
        ctx.addServletMappingDecoded("/partner-call", "partner-call");
        tomcat.start();
        if (!"STARTED".equals(conn.getStateName())) {
            System.err.println("scenario app: connector failed to start on 127.0.0.1:" + port);
            System.exit(1);
        }

        long pid = ProcessHandle.current().pid();
        var handler = (org.apache.coyote.AbstractProtocol<?>) conn.getProtocolHandler();
        STATS.connections = handler::getConnectionCount;
        if (!statsFile.isEmpty()) {
            Path out = Path.of(statsFile), tmp = Path.of(statsFile + ".tmp");
            ScheduledExecutorService ses = Executors.newSingleThreadScheduledExecutor(r -> {
                Thread t = new Thread(r, "qs-stats");
                t.setDaemon(true);
                return t;
            });
            ses.scheduleAtFixedRate(() -> {
                try {
                    Files.writeString(tmp, STATS.json(profile, pid));
                    Files.move(tmp, out, StandardCopyOption.REPLACE_EXISTING, StandardCopyOption.ATOMIC_MOVE);
                } catch (IOException e) {
                    System.err.println("scenario app: cannot write stats: " + e);
                }
            }, 0, 250, TimeUnit.MILLISECONDS);
        }
        System.out.printf("scenario app: profile=%s pid=%d listening 127.0.0.1:%d pool=%d timeout=%dms gate=%s "
                        + "maxThreads=%s pg=%s partner=%s retryPartner=%s retryAttempts=%d partnerLimit=%s%n",
                profile, pid, port, poolSize, poolTimeoutMs, profile.equals("gated") ? gateSize : "none",
                profile.equals("platform") ? maxThreads : "n/a (virtual)", pg, partner, retryPartner, retryAttempts,
                partnerLimit > 0 ? partnerLimit : "none");
        System.out.flush();
        tomcat.getServer().await();
    }
}
