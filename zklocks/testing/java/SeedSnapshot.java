// Writes a ZooKeeper snapshot into a data dir before the server's first start, with ZooKeeper's own DataTree
// and FileTxnSnapLog, so a test can begin where a real deployment would be after billions of creates.
//
//   javac -cp /usr/share/java/zookeeper.jar:/usr/share/java/zookeeper-jute.jar -d OUT SeedSnapshot.java
//   java -cp OUT:<same jars> SeedSnapshot DATA_DIR PATH=CVERSION [PATH=CVERSION ...]
//
// Every PATH is created with its parents (open ACL, empty data) and then given the child version CVERSION:
// the next sequential child created below it gets the suffix CVERSION.

import java.io.File;
import java.util.concurrent.ConcurrentHashMap;

import org.apache.zookeeper.ZooDefs;
import org.apache.zookeeper.server.DataTree;
import org.apache.zookeeper.server.persistence.FileTxnSnapLog;

public final class SeedSnapshot {
    public static void main(String[] args) throws Exception {
        if (args.length < 2) {
            System.err.println("usage: SeedSnapshot DATA_DIR PATH=CVERSION [PATH=CVERSION ...]");
            System.exit(2);
        }
        File dataDir = new File(args[0]);
        DataTree tree = new DataTree();
        long zxid = 0;
        long now = System.currentTimeMillis();
        for (int i = 1; i < args.length; i++) {
            int eq = args[i].lastIndexOf('=');
            String path = args[i].substring(0, eq);
            int cversion = Integer.parseInt(args[i].substring(eq + 1));
            StringBuilder prefix = new StringBuilder();
            for (String part : path.substring(1).split("/")) {
                prefix.append('/').append(part);
                if (tree.getNode(prefix.toString()) == null) {
                    tree.createNode(prefix.toString(), new byte[0], ZooDefs.Ids.OPEN_ACL_UNSAFE, 0, -1, ++zxid, now);
                }
            }
            tree.setCversionPzxid(path, cversion, ++zxid);
            System.out.println(path + " cversion=" + tree.getNode(path).stat.getCversion());
        }
        tree.lastProcessedZxid = zxid;
        FileTxnSnapLog snapLog = new FileTxnSnapLog(dataDir, dataDir);
        snapLog.save(tree, new ConcurrentHashMap<Long, Integer>(), true);
        snapLog.close();
    }
}
