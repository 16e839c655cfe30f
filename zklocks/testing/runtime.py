"""Where Debian's ZooKeeper and the JVM are: overridable with ZKLOCKS_ZK_CLASSPATH, ZKLOCKS_JAVA, ZKLOCKS_JAVAC."""

from __future__ import annotations

import os

# Without netty-codec the server accepts connections and then drops them.
CLASSPATH = os.environ.get("ZKLOCKS_ZK_CLASSPATH", "/usr/share/java/zookeeper.jar:/usr/share/java/netty-codec.jar")
JAVA = os.environ.get("ZKLOCKS_JAVA", "java")
JAVAC = os.environ.get("ZKLOCKS_JAVAC", "javac")
# Debian's Apache Curator (libcurator-recipes-java) and what it needs at run time.
CURATOR_CLASSPATH = os.environ.get(
    "ZKLOCKS_CURATOR_CLASSPATH",
    ":".join(
        f"/usr/share/java/{jar}.jar"
        for jar in (
            "curator-recipes",
            "curator-framework",
            "curator-client",
            "zookeeper",
            "zookeeper-jute",
            "guava",
            "slf4j-api",
            "slf4j-nop",
        )
    ),
)
