/*
 * A JVM service for benches/hostmix.sh: THREADS threads, each busy for
 * BUSY_MS (building strings, filling and reading maps, sorting: code the
 * JIT compiles) then asleep for SLEEP_MS, over and over. Every second it
 * writes the requests done so far to PROGRESS (written aside and renamed,
 * so a reader never sees half a number).
 *
 * Usage: java MixService PROGRESS [THREADS] [BUSY_MS] [SLEEP_MS]
 */
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardCopyOption;
import java.util.ArrayList;
import java.util.Collections;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.atomic.AtomicLong;

public class MixService {
    static final AtomicLong done = new AtomicLong();
    static volatile long sink;

    /** One request: a map of strings built, read back and sorted. */
    static long request(long n) {
        Map<String, Long> map = new HashMap<>();
        for (int i = 0; i < 64; i++) {
            map.put("key-" + i + "-" + (n * i % 977), n * i);
        }
        List<String> keys = new ArrayList<>(map.keySet());
        Collections.sort(keys);
        long sum = 0;
        for (String k : keys) {
            sum += map.get(k) + k.hashCode();
        }
        return sum;
    }

    public static void main(String[] args) throws Exception {
        Path progress = Path.of(args[0]);
        Path tmp = Path.of(args[0] + ".tmp");
        int threads = args.length > 1 ? Integer.parseInt(args[1]) : 4;
        long busyNs = (args.length > 2 ? Long.parseLong(args[2]) : 20) * 1_000_000L;
        long sleepMs = args.length > 3 ? Long.parseLong(args[3]) : 80;
        for (int t = 0; t < threads; t++) {
            Thread worker = new Thread(() -> {
                long n = 0;
                while (true) {
                    long end = System.nanoTime() + busyNs;
                    while (System.nanoTime() < end) {
                        sink += request(n++);
                        done.incrementAndGet();
                    }
                    try {
                        Thread.sleep(sleepMs);
                    } catch (InterruptedException e) {
                        return;
                    }
                }
            });
            worker.setDaemon(true);
            worker.start();
        }
        while (true) {
            Thread.sleep(1000);
            Files.writeString(tmp, done.get() + "\n");
            Files.move(tmp, progress, StandardCopyOption.REPLACE_EXISTING, StandardCopyOption.ATOMIC_MOVE);
        }
    }
}
