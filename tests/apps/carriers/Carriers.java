// Virtual-thread workloads for qscope's carrier tests (tests/integration/carriers_test.cpp).
//
//   java Carriers MODE TASKS MILLIS TRIGGER_FILE
//
// Prints "READY" once the scheduler's carriers exist, waits until TRIGGER_FILE appears (so
// the test can start JFR and qscope first and align their windows), runs TASKS virtual
// threads that each block MILLIS in the way MODE says, prints "DONE <tasks>" and then
// idles until killed. Modes:
//   pinned   a virtual thread parks while pinned: Thread.sleep inside an FFM upcall from
//            qsort's comparator (a native frame on the stack pins on JDK 24+, where
//            synchronized no longer does); JFR records jdk.VirtualThreadPinned for each.
//   parking  heavy parking that never pins: ReentrantLock contention, LockSupport.parkNanos,
//            Thread.sleep, and Thread.sleep inside synchronized (unmounts since JEP 491).
//   usleep   an FFM downcall to libc usleep: the carrier blocks in clock_nanosleep with the
//            virtual thread mounted; nothing parks, so JFR records nothing.
//   queue    virtual threads wait in SynchronousQueue.poll from Pool.getConnection, as
//            HikariCP's waiters do: they unmount, so no OS thread waits for them; only a
//            thread dump (qscope --jvm-dump) shows where they are.
import java.lang.foreign.*;
import java.lang.invoke.*;
import java.nio.file.*;
import java.util.concurrent.*;
import java.util.concurrent.locks.*;

public class Carriers {
    static long millis;
    static MethodHandle qsort, usleep;
    static MemorySegment comparatorStub;

    static int compare(MemorySegment a, MemorySegment b) {
        try {
            Thread.sleep(millis);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
        return Integer.compare(a.get(ValueLayout.JAVA_INT, 0), b.get(ValueLayout.JAVA_INT, 0));
    }

    static void pinned() throws Throwable {
        try (Arena arena = Arena.ofConfined()) {
            MemorySegment arr = arena.allocateFrom(ValueLayout.JAVA_INT, 2, 1);
            // Two elements: glibc's qsort calls the comparator exactly once.
            qsort.invokeExact(arr, 2L, 4L, comparatorStub);
        }
    }

    static final ReentrantLock lock = new ReentrantLock();
    static final Object monitor = new Object();

    static void parking(int i) throws Exception {
        switch (i % 4) {
            case 0 -> { lock.lock(); try { Thread.sleep(millis); } finally { lock.unlock(); } }
            case 1 -> LockSupport.parkNanos(millis * 1_000_000L);
            case 2 -> Thread.sleep(millis);
            default -> { synchronized (monitor) { Thread.sleep(millis / 4 + 1); } }
        }
    }

    static final class Pool {
        private final SynchronousQueue<Object> handoff = new SynchronousQueue<>();

        Object getConnection(long timeoutMillis) throws InterruptedException {
            return handoff.poll(timeoutMillis, TimeUnit.MILLISECONDS);
        }
    }

    static final Pool pool = new Pool();

    public static void main(String[] args) throws Throwable {
        if (args.length != 4) {
            System.err.println("usage: Carriers pinned|parking|usleep|queue TASKS MILLIS TRIGGER_FILE");
            System.exit(2);
        }
        String mode = args[0];
        int tasks = Integer.parseInt(args[1]);
        millis = Long.parseLong(args[2]);
        Path trigger = Path.of(args[3]);

        Linker linker = Linker.nativeLinker();
        SymbolLookup libc = linker.defaultLookup();
        qsort = linker.downcallHandle(libc.find("qsort").orElseThrow(),
                FunctionDescriptor.ofVoid(ValueLayout.ADDRESS, ValueLayout.JAVA_LONG, ValueLayout.JAVA_LONG,
                        ValueLayout.ADDRESS));
        usleep = linker.downcallHandle(libc.find("usleep").orElseThrow(),
                FunctionDescriptor.of(ValueLayout.JAVA_INT, ValueLayout.JAVA_INT));
        MethodHandle cmp = MethodHandles.lookup().findStatic(Carriers.class, "compare",
                MethodType.methodType(int.class, MemorySegment.class, MemorySegment.class));
        AddressLayout intPtr = ValueLayout.ADDRESS.withTargetLayout(ValueLayout.JAVA_INT);
        comparatorStub = linker.upcallStub(cmp, FunctionDescriptor.of(ValueLayout.JAVA_INT, intPtr, intPtr),
                Arena.global());

        // Warm up: start the carriers (and link the call sites) before READY so that the
        // measured window holds only the workload.
        try (var ex = Executors.newVirtualThreadPerTaskExecutor()) {
            for (int i = 0; i < 8; i++) ex.submit(() -> { Thread.yield(); return null; });
            // A timed sleep starts JDK 25's ForkJoinPool-1-delayScheduler, which shares the
            // carriers' comm: every mode runs with it present.
            ex.submit(() -> { Thread.sleep(1); return null; });
        }
        System.out.println("READY");
        System.out.flush();
        while (!Files.exists(trigger)) Thread.sleep(10);

        long t0 = System.nanoTime();
        try (var ex = Executors.newVirtualThreadPerTaskExecutor()) {
            for (int i = 0; i < tasks; i++) {
                final int n = i;
                ex.submit(() -> {
                    try {
                        switch (mode) {
                            case "pinned" -> pinned();
                            case "parking" -> parking(n);
                            case "queue" -> pool.getConnection(millis);
                            case "usleep" -> { int rc = (int) usleep.invokeExact((int) (millis * 1000)); }
                            default -> throw new IllegalArgumentException(mode);
                        }
                    } catch (Throwable t) {
                        t.printStackTrace();
                    }
                    return null;
                });
            }
        }
        System.out.println("DONE " + tasks + " " + (System.nanoTime() - t0) / 1_000_000 + "ms");
        System.out.flush();
        Thread.sleep(Long.MAX_VALUE);
    }
}
