/*
 * JitSplit: a Java workload with a known split under known callers, for
 * profiling code the JVM compiled (JIT code named only by a perf map).
 *
 * Each round, main calls work(u) with u varied around U:
 *   work → leafA (3 u iterations), then mid → leafB (7 u)
 * every iteration the same loop body, so by construction:
 *   exclusive: leafA 30 %, leafB 70 %
 *   inclusive: work 100 %, mid 70 %
 * Run it with -XX:CompileCommand=dontinline,JitSplit::* so that C2 keeps each
 * method a frame of its own. Before it prints "ready" it runs WARMUP_ROUNDS
 * short rounds, enough calls for the JIT to compile every method of the
 * round with C2 (its last tier) soon after; the tests wait for that with
 * `jcmd PID Compiler.codelist`.
 *
 * With `--late FILE`, once FILE exists, each round also calls late → lateLeaf
 * (5 u): code compiled only after that point (never run before it).
 *
 * With `--calls`, each round runs calls(10 u) in place of work: a loop that
 * calls tiny, a method of a few instructions, every iteration, so that many
 * samples fall in tiny's first and last instructions, where its frame is
 * being built or taken down. calls is 100 % inclusive.
 *
 * Usage: java JitSplit SECONDS [--ready] [--late FILE] [--calls]
 */
import java.io.File;

public class JitSplit {
    static final long U = 100000;
    static final long WARMUP_U = 100;
    static final int WARMUP_ROUNDS = 50000;
    static volatile long sink;
    static long x = 88172645463325252L;

    /** A round's length drawn from [n/2, 3n/2) (see vary in workload.h). */
    static long vary(long n) {
        x ^= x << 13;
        x ^= x >>> 7;
        x ^= x << 17;
        return n / 2 + Long.remainderUnsigned(x, n);
    }

    static void leafA(long n) {
        for (long i = 0; i < n; i++) {
            sink += i * 2654435761L;
        }
    }

    static void leafB(long n) {
        for (long i = 0; i < n; i++) {
            sink += i * 2654435761L;
        }
    }

    static void lateLeaf(long n) {
        for (long i = 0; i < n; i++) {
            sink += i * 2654435761L;
        }
    }

    static void mid(long n) {
        leafB(n);
        sink++;
    }

    static void work(long u) {
        leafA(3 * u);
        mid(7 * u);
        sink++;
    }

    static long tiny(long i) {
        return i * 2654435761L;
    }

    static void calls(long n) {
        long s = 0;
        for (long i = 0; i < n; i++) {
            s += tiny(i);
        }
        sink += s;
    }

    static void late(long u) {
        lateLeaf(5 * u);
        sink++;
    }

    public static void main(String[] args) {
        double seconds = Double.parseDouble(args[0]);
        boolean ready = false;
        boolean callsOnly = false;
        File trigger = null;
        for (int i = 1; i < args.length; i++) {
            if (args[i].equals("--ready")) {
                ready = true;
            } else if (args[i].equals("--calls")) {
                callsOnly = true;
            } else if (args[i].equals("--late")) {
                trigger = new File(args[++i]);
            }
        }
        for (int i = 0; i < WARMUP_ROUNDS; i++) {
            if (callsOnly) {
                calls(10 * vary(WARMUP_U));
            } else {
                work(vary(WARMUP_U));
            }
        }
        if (ready) {
            System.out.println("ready");
            System.out.flush();
        }
        long deadline = System.nanoTime() + (long) (seconds * 1e9);
        boolean lateOn = false;
        long rounds = 0;
        while (System.nanoTime() < deadline) {
            long u = vary(U);
            if (callsOnly) {
                calls(10 * u);
                continue;
            }
            work(u);
            if (lateOn) {
                late(u);
            } else if (trigger != null && ++rounds % 64 == 0) {
                lateOn = trigger.exists();
            }
        }
    }
}
