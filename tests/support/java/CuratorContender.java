// Contenders on Apache Curator's own recipes, for the tests that prove zklocks' LAYOUT "curator" excludes them.
//
//   javac -cp <curator-recipes, curator-framework, curator-client, zookeeper, zookeeper-jute, guava, slf4j-api>
//         -d OUT CuratorContender.java
//   java -cp OUT:<same jars> CuratorContender CONNECT PATH RECIPE THREADS SECONDS HOLD_MS LOG [MAX_LEASES]
//
// RECIPE is "mutex" (InterProcessMutex), "rw" (InterProcessReadWriteLock: even threads write, odd threads read),
// "semaphore" (InterProcessSemaphoreV2 with MAX_LEASES) or "latch" (LeaderLatch: each round a fresh latch is
// started, awaited as leader, and closed). Each thread takes and releases the lock in a loop for SECONDS from the
// session's start (holding for a random 0..HOLD_MS ms, or exactly -HOLD_MS ms if negative) and appends one JSON line
// per hold to LOG:
//   {"side": "java", "who": "java-<thread>", "kind": "w"|"r"|"x"|"l"|"e", "asked": ns, "start": ns, "end": ns}
// with System.nanoTime(), which is CLOCK_MONOTONIC on Linux: "start" is taken after the acquire returned and "end"
// before the release is sent, so the interval lies inside the hold. READY is printed once the session is up.

import java.io.FileWriter;
import java.io.PrintWriter;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.ThreadLocalRandom;
import java.util.concurrent.TimeUnit;

import org.apache.curator.framework.CuratorFramework;
import org.apache.curator.framework.CuratorFrameworkFactory;
import org.apache.curator.framework.api.ACLProvider;
import org.apache.curator.framework.recipes.leader.LeaderLatch;
import org.apache.curator.framework.recipes.locks.InterProcessLock;
import org.apache.curator.framework.recipes.locks.InterProcessMutex;
import org.apache.curator.framework.recipes.locks.InterProcessReadWriteLock;
import org.apache.curator.framework.recipes.locks.InterProcessSemaphoreV2;
import org.apache.curator.framework.recipes.locks.Lease;
import org.apache.curator.retry.ExponentialBackoffRetry;
import org.apache.zookeeper.ZooDefs;
import org.apache.zookeeper.data.ACL;
import org.apache.zookeeper.data.Id;
import org.apache.zookeeper.server.auth.DigestAuthenticationProvider;

public final class CuratorContender {
    private static final long WAIT_SECONDS = 30;

    public static void main(String[] args) throws Exception {
        if (args.length < 7) {
            System.err.println("usage: CuratorContender CONNECT PATH RECIPE THREADS SECONDS HOLD_MS LOG [MAX_LEASES]");
            System.exit(2);
        }
        final String path = args[1];
        final String recipe = args[2];
        final int threads = Integer.parseInt(args[3]);
        final int holdMs = Integer.parseInt(args[5]);
        final int maxLeases = args.length > 7 ? Integer.parseInt(args[7]) : 1;
        final PrintWriter log = new PrintWriter(new FileWriter(args[6], true));
        CuratorFrameworkFactory.Builder builder = CuratorFrameworkFactory.builder()
                .connectString(args[0])
                .sessionTimeoutMs(4000)
                .connectionTimeoutMs(4000)
                .retryPolicy(new ExponentialBackoffRetry(50, 5));
        // The zklocks alias's credential (manage.py zklocks_credential): the nodes zklocks makes let only that
        // identity create below them, and ours get the same ACL as theirs.
        final String credential = System.getenv("ZKLOCKS_CREDENTIAL");
        if (credential != null && !credential.isEmpty()) {
            final List<ACL> acl = new ArrayList<>();
            acl.add(new ACL(ZooDefs.Perms.ALL, new Id("digest", DigestAuthenticationProvider.generateDigest(credential))));
            acl.add(new ACL(ZooDefs.Perms.READ, ZooDefs.Ids.ANYONE_ID_UNSAFE));
            builder = builder.authorization("digest", credential.getBytes(StandardCharsets.UTF_8)).aclProvider(
                    new ACLProvider() {
                        public List<ACL> getDefaultAcl() {
                            return acl;
                        }

                        public List<ACL> getAclForPath(String p) {
                            return acl;
                        }
                    });
        }
        CuratorFramework client = builder.build();
        client.start();
        if (!client.blockUntilConnected(20, TimeUnit.SECONDS)) {
            System.err.println("no session");
            System.exit(3);
        }
        // SECONDS count from the session: a JVM slow to connect (a loaded machine) still contends for all of them.
        final long until = System.nanoTime() + (long) (Double.parseDouble(args[4]) * 1e9);
        System.out.println("READY");
        System.out.flush();
        final InterProcessSemaphoreV2 semaphore =
                recipe.equals("semaphore") ? new InterProcessSemaphoreV2(client, path, maxLeases) : null;
        final InterProcessReadWriteLock rw = recipe.equals("rw") ? new InterProcessReadWriteLock(client, path) : null;
        final boolean[] failed = {false};
        List<Thread> running = new ArrayList<>();
        for (int i = 0; i < threads; i++) {
            final int idx = i;
            final boolean latch = recipe.equals("latch");
            final String kind = latch ? "e" : semaphore != null ? "l" : rw == null ? "x" : idx % 2 == 0 ? "w" : "r";
            final InterProcessLock lock = semaphore != null || latch ? null
                    : rw == null ? new InterProcessMutex(client, path)
                    : kind.equals("w") ? rw.writeLock() : rw.readLock();
            Thread t = new Thread(() -> {
                try {
                    // At least one hold per thread, however long the JVM took to get here (a loaded machine).
                    do {
                        long asked = System.nanoTime();
                        Lease lease = null;
                        LeaderLatch leader = null;
                        if (latch) {
                            leader = new LeaderLatch(client, path);
                            leader.start();
                            if (!leader.await(WAIT_SECONDS, TimeUnit.SECONDS)) {
                                throw new IllegalStateException("not elected within " + WAIT_SECONDS + " s");
                            }
                        } else if (semaphore != null) {
                            lease = semaphore.acquire(WAIT_SECONDS, TimeUnit.SECONDS);
                            if (lease == null) throw new IllegalStateException("no lease within " + WAIT_SECONDS + " s");
                        } else if (!lock.acquire(WAIT_SECONDS, TimeUnit.SECONDS)) {
                            throw new IllegalStateException("not acquired within " + WAIT_SECONDS + " s");
                        }
                        long start = System.nanoTime();
                        Thread.sleep(holdMs < 0 ? -holdMs : ThreadLocalRandom.current().nextInt(holdMs + 1));
                        long end = System.nanoTime();
                        if (leader != null) leader.close();
                        else if (lease != null) semaphore.returnLease(lease);
                        else lock.release();
                        synchronized (log) {
                            log.printf("{\"side\": \"java\", \"who\": \"java-%d\", \"kind\": \"%s\", \"asked\": %d, "
                                    + "\"start\": %d, \"end\": %d}%n", idx, kind, asked, start, end);
                        }
                        Thread.sleep(ThreadLocalRandom.current().nextInt(3));
                    } while (System.nanoTime() < until);
                } catch (Exception e) {
                    e.printStackTrace();
                    synchronized (failed) {
                        failed[0] = true;
                    }
                }
            });
            t.start();
            running.add(t);
        }
        for (Thread t : running) t.join();
        synchronized (log) {
            log.close();
        }
        client.close();
        System.out.println(failed[0] ? "FAILED" : "DONE");
        System.exit(failed[0] ? 1 : 0);
    }
}
