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
// to the partner with no read timeout). A failed pool borrow or a full gate answers 503.
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
import java.net.HttpURLConnection;
import java.net.URI;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardCopyOption;
import java.sql.Connection;
import java.sql.SQLException;
import java.sql.Statement;
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
                dbPoolTimeout = new AtomicLong(), dbGateRejected = new AtomicLong(),
                dbOtherError = new AtomicLong(), dbNow = new AtomicLong(), dbBorrowing = new AtomicLong(),
                dbQuerying = new AtomicLong(), quoteStarted = new AtomicLong(), quoteDone = new AtomicLong(),
                quoteNow = new AtomicLong(), pings = new AtomicLong();
        final AtomicLong dbNowMax = new AtomicLong(), dbQueryingMax = new AtomicLong();
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
                            + "\"db\":{\"started\":%d,\"ok\":%d,\"pool_timeout\":%d,\"gate_rejected\":%d,"
                            + "\"other_error\":%d,\"in_progress\":%d,\"in_progress_max\":%d,\"borrowing\":%d,"
                            + "\"querying\":%d,\"querying_max\":%d},"
                            + "\"quote\":{\"started\":%d,\"done\":%d,\"in_progress\":%d,\"oldest_seconds\":%.3f},"
                            + "\"connections\":%d}\n",
                    profile, pid, now, pings.get(), dbStarted.get(), dbOk.get(), dbPoolTimeout.get(),
                    dbGateRejected.get(), dbOtherError.get(), dbNow.get(), dbNowMax.get(), dbBorrowing.get(),
                    dbQuerying.get(), dbQueryingMax.get(), quoteStarted.get(), quoteDone.get(), quoteNow.get(),
                    oldestQuote, connections.getAsLong());
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
            try {
                c = ds.getConnection();
            } catch (SQLException e) {
                // HikariCP throws SQLTransientConnectionException after connectionTimeout.
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
        String statsFile = prop("qs.stats", "");
        String baseDir = prop("qs.baseDir", Files.createTempDirectory("qs-tomcat").toString());

        HikariConfig hc = new HikariConfig();
        hc.setJdbcUrl("jdbc:postgresql://" + pg + "/postgres?ApplicationName=qscope-scenario");
        hc.setUsername(prop("qs.pgUser", "postgres"));
        hc.setMaximumPoolSize(poolSize);
        hc.setMinimumIdle(poolSize);  // fixed-size pool, all connections open before load
        hc.setConnectionTimeout(poolTimeoutMs);
        HikariDataSource ds = new HikariDataSource(hc);

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
        Tomcat.addServlet(ctx, "db", new DbServlet(ds, profile.equals("gated") ? new Semaphore(gateSize) : null));
        ctx.addServletMappingDecoded("/db", "db");
        Tomcat.addServlet(ctx, "quote", new QuoteServlet(partner));
        ctx.addServletMappingDecoded("/quote", "quote");
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
                        + "maxThreads=%s pg=%s partner=%s%n",
                profile, pid, port, poolSize, poolTimeoutMs, profile.equals("gated") ? gateSize : "none",
                profile.equals("platform") ? maxThreads : "n/a (virtual)", pg, partner);
        System.out.flush();
        tomcat.getServer().await();
    }
}
