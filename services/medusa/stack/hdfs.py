"""A one-NameNode, one-DataNode HDFS run from Hadoop's own jars, for checkpoints on a shared store.

Spark (pyspark ships hadoop-client 3.5.0) already speaks ``hdfs://``; this module is the
server side: it writes the configuration (every port on 127.0.0.1, replication 1, no
permission checks, no safe-mode wait), formats the NameNode once, and gives the two java
command lines and a readiness check, so the launcher can run them like Kafka or the registry.
Installed by ``infra/install_hdfs.sh`` into ``<cache>/hadoop/<version>/libs``.
"""

from __future__ import annotations

import secrets
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING
from xml.sax.saxutils import escape

import httpx

from medusa.settings import REPO_ROOT
from medusa.stack.pins import pinned

if TYPE_CHECKING:
    from medusa.stack.components import Component

HDFS_POM = REPO_ROOT / "infra" / "maven" / "hdfs" / "pom.xml"
NAMENODE_MAIN = "org.apache.hadoop.hdfs.server.namenode.NameNode"
DATANODE_MAIN = "org.apache.hadoop.hdfs.server.datanode.DataNode"
FS_STATE_BEAN = "Hadoop:service=NameNode,name=FSNamesystemState"
WEBAPPS = ("hdfs", "datanode", "static")
# Hadoop 3.4 predates Java 17's closed modules: without these, WebHDFS's first request
# fails (JAXB 2.2 defines classes through ClassLoader.defineClass); the same list Spark uses.
JDK17_OPENS = [f"--add-opens=java.base/{package}=ALL-UNNAMED" for package in (
    "java.lang", "java.lang.reflect", "java.io", "java.net", "java.nio", "java.util",
    "java.util.concurrent", "sun.nio.ch")]


# Hadoop logs through slf4j 1.7 + reload4j (log4j 1.x API). Without a config it prints
# "log4j:WARN No appenders" and nothing else; INFO on everything floods the log with one
# line per block and per RPC, hence the quieter loggers.
_LOG4J = """\
hadoop.root.logger={level},console
log4j.rootLogger=${{hadoop.root.logger}}
log4j.appender.console=org.apache.log4j.ConsoleAppender
log4j.appender.console.target=System.out
log4j.appender.console.layout=org.apache.log4j.PatternLayout
log4j.appender.console.layout.ConversionPattern=[%d{{ISO8601}}] %p %m (%c{{1}})%n
# "Unable to load native-hadoop library": the pure-Java code paths are used instead.
log4j.logger.org.apache.hadoop.util.NativeCodeLoader=ERROR
log4j.logger.org.apache.hadoop.hdfs.server.namenode.FSNamesystem.audit=WARN
log4j.logger.org.apache.hadoop.hdfs.StateChange=WARN
log4j.logger.BlockStateChange=WARN
# Three lines per block written, one per block deleted, one per HTTP request.
log4j.logger.org.apache.hadoop.hdfs.server.datanode.DataNode=WARN
log4j.logger.org.apache.hadoop.hdfs.server.datanode.fsdataset.impl.FsDatasetAsyncDiskService=WARN
log4j.logger.http.requests=WARN
log4j.logger.org.eclipse.jetty=WARN
"""
# WebHDFS's Jersey 1 logs through java.util.logging, to stderr, at INFO by default.
_JUL = """\
handlers=java.util.logging.ConsoleHandler
.level=WARNING
com.sun.jersey.level=SEVERE
"""


def hadoop_version(pom: Path = HDFS_POM) -> str:
    """The Hadoop version the pom pins (the install folder is named after it)."""
    return pinned(pom, "hadoop.version")


def hdfs_libs(cache_dir: Path) -> Path:
    """The installed jars; raises when ``infra/install_hdfs.sh`` has not run."""
    version = hadoop_version()
    libs = cache_dir / "hadoop" / version / "libs"
    if not (libs.parent / ".installed").is_file():
        from medusa.stack.components import ComponentMissingError

        raise ComponentMissingError(f"Hadoop {version} (HDFS) is not installed in {libs}; "
                                    "run infra/install_hdfs.sh")
    return libs


@dataclass(frozen=True)
class HdfsPorts:
    """Every port the two daemons bind, all on 127.0.0.1."""

    namenode_rpc: int
    namenode_http: int
    """The web UI and ``/jmx``, which the readiness check reads."""
    datanode_data: int
    """Block transfer (``dfs.datanode.address``)."""
    datanode_ipc: int
    datanode_http: int
    datanode_http_proxy: int
    """The DataNode's internal Jetty behind its Netty web server (default: a random port)."""

    @classmethod
    def from_base(cls, base: int) -> HdfsPorts:
        """Six consecutive ports from ``base``."""
        return cls(*range(base, base + 6))

    def all(self) -> list[int]:
        return [self.namenode_rpc, self.namenode_http, self.datanode_data, self.datanode_ipc,
                self.datanode_http, self.datanode_http_proxy]


@dataclass(frozen=True)
class HdfsCommand:
    name: str
    """``hdfs-namenode`` or ``hdfs-datanode``."""
    command: list[str]
    env: dict[str, str]


class LocalHdfs:
    """A single-node HDFS whose files all live under ``home`` (conf/, name/, data/, logs/)."""

    def __init__(self, home: Path, ports: HdfsPorts, java: str, libs: Path,
                 heap: str = "-Xmx256m", log_level: str = "INFO") -> None:
        self.home = home
        self.ports = ports
        self.java = java
        self.libs = libs
        self.heap = heap
        self.log_level = log_level

    @property
    def conf_dir(self) -> Path:
        return self.home / "conf"

    @property
    def name_dir(self) -> Path:
        return self.home / "name"

    @property
    def data_dir(self) -> Path:
        return self.home / "data"

    @property
    def uri(self) -> str:
        """``fs.defaultFS``: prefix of every checkpoint location on this HDFS."""
        return f"hdfs://127.0.0.1:{self.ports.namenode_rpc}"

    @property
    def http_url(self) -> str:
        return f"http://127.0.0.1:{self.ports.namenode_http}"

    def site(self) -> dict[str, dict[str, str]]:
        """The properties of core-site.xml and hdfs-site.xml."""
        p, loopback = self.ports, "127.0.0.1"
        core = {
            "fs.defaultFS": self.uri,
            "hadoop.tmp.dir": str(self.home / "tmp"),
            "hadoop.http.authentication.signature.secret.file":
                str(self.conf_dir / "http-signature-secret"),
        }
        hdfs = {
            "dfs.namenode.rpc-address": f"{loopback}:{p.namenode_rpc}",
            "dfs.namenode.http-address": f"{loopback}:{p.namenode_http}",
            # Not bound with the default HTTP_ONLY policy, but never on 0.0.0.0 if enabled.
            "dfs.namenode.https-address": f"{loopback}:0",
            "dfs.namenode.secondary.http-address": f"{loopback}:0",
            "dfs.namenode.secondary.https-address": f"{loopback}:0",
            "dfs.datanode.address": f"{loopback}:{p.datanode_data}",
            "dfs.datanode.ipc.address": f"{loopback}:{p.datanode_ipc}",
            "dfs.datanode.http.address": f"{loopback}:{p.datanode_http}",
            "dfs.datanode.https.address": f"{loopback}:0",
            "dfs.datanode.http.internal-proxy.port": str(p.datanode_http_proxy),
            "dfs.namenode.name.dir": self.name_dir.as_uri(),
            "dfs.datanode.data.dir": self.data_dir.as_uri(),
            "dfs.replication": "1",
            "dfs.permissions.enabled": "false",
            # Leave safe mode at once: there is one DataNode and nothing to wait for.
            "dfs.namenode.safemode.threshold-pct": "0",
            "dfs.namenode.safemode.min.datanodes": "0",
            "dfs.namenode.safemode.extension": "0",
            # The DataNode registers and reports within a second, not three.
            "dfs.heartbeat.interval": "1",
            "dfs.namenode.heartbeat.recheck-interval": "10000",
            # Keep the NameNode from rejecting the one DataNode as "busy" under load.
            "dfs.namenode.redundancy.considerLoad": "false",
        }
        return {"core-site.xml": core, "hdfs-site.xml": hdfs}

    def configure(self) -> None:
        """Write conf/ (site files, log configs, web folders); safe to repeat."""
        self.conf_dir.mkdir(parents=True, exist_ok=True)
        for file, properties in self.site().items():
            body = "".join(
                f"  <property><name>{escape(k)}</name><value>{escape(v)}</value></property>\n"
                for k, v in properties.items())
            (self.conf_dir / file).write_text(
                f'<?xml version="1.0"?>\n<configuration>\n{body}</configuration>\n')
        (self.conf_dir / "log4j.properties").write_text(_LOG4J.format(level=self.log_level))
        (self.conf_dir / "logging.properties").write_text(_JUL)
        # The web servers' cookie signing secret; without the file each logs a warning.
        secret = self.conf_dir / "http-signature-secret"
        if not secret.is_file():
            secret.write_text(secrets.token_hex(32))
            secret.chmod(0o600)
        # The web servers (which serve /jmx and WebHDFS) look up webapps/<name> on the
        # classpath; the Maven jars lack the distribution's UI files, empty folders will do.
        for webapp in WEBAPPS:
            (self.conf_dir / "webapps" / webapp).mkdir(parents=True, exist_ok=True)

    def formatted(self) -> bool:
        return (self.name_dir / "current" / "VERSION").is_file()

    def format(self) -> None:
        """Format the NameNode's metadata once; a formatted one keeps its files."""
        if self.formatted():
            return
        done = subprocess.run(
            [*self._java("namenode", NAMENODE_MAIN, "WARN"),
             "-format", "-nonInteractive", "-clusterid", "medusa"],
            capture_output=True, text=True, check=False)
        if done.returncode != 0 or not self.formatted():
            tail = (done.stderr or done.stdout).strip().splitlines()[-3:]
            raise RuntimeError(f"formatting the HDFS NameNode in {self.name_dir} failed: "
                               f"{' / '.join(tail)}")

    def prepare(self) -> None:
        """One-time set-up before the first start: ``configure`` then ``format``."""
        self.configure()
        self.format()

    def _java(self, role: str, main: str, log_level: str | None = None) -> list[str]:
        options = [
            self.java, self.heap, *JDK17_OPENS,
            f"-Dlog4j.configuration={(self.conf_dir / 'log4j.properties').as_uri()}",
            f"-Djava.util.logging.config.file={self.conf_dir / 'logging.properties'}",
            f"-Dhadoop.log.dir={self.home / 'logs'}",
            f"-Dhadoop.home.dir={self.home}",
            f"-Dhadoop.id.str=medusa-{role}",
            "-Djava.net.preferIPv4Stack=true",
        ]
        if log_level is not None:  # overrides the level log4j.properties sets
            options.append(f"-Dhadoop.root.logger={log_level},console")
        # conf/ first: Configuration reads core-site.xml and hdfs-site.xml off the classpath.
        return [*options, "-cp", f"{self.conf_dir}:{self.libs}/*", main]

    def commands(self) -> list[HdfsCommand]:
        """The NameNode's and the DataNode's command lines (start them in this order)."""
        env = {"HADOOP_CONF_DIR": str(self.conf_dir)}
        return [HdfsCommand("hdfs-namenode", self._java("namenode", NAMENODE_MAIN), env),
                HdfsCommand("hdfs-datanode", self._java("datanode", DATANODE_MAIN), env)]

    def _fs_state(self, timeout_s: float) -> dict[str, object] | None:
        try:
            response = httpx.get(f"{self.http_url}/jmx", params={"qry": FS_STATE_BEAN},
                                 timeout=timeout_s)
            beans = response.json().get("beans", []) if response.status_code == 200 else []
        except (httpx.HTTPError, ValueError):
            return None
        return beans[0] if beans else None

    def namenode_ready(self, timeout_s: float = 2.0) -> bool:
        """The NameNode answers and has left safe mode."""
        state = self._fs_state(timeout_s)
        return state is not None and state.get("FSState") == "Operational"

    def ready(self, timeout_s: float = 2.0) -> bool:
        """Writable: out of safe mode, and a live DataNode has reported free space."""
        state = self._fs_state(timeout_s)
        if state is None or state.get("FSState") != "Operational":
            return False
        live, remaining = state.get("NumLiveDataNodes", 0), state.get("CapacityRemaining", 0)
        return isinstance(live, int) and live >= 1 and isinstance(remaining, int) and remaining > 0


def hdfs_components(hdfs: LocalHdfs) -> list[Component]:
    """``hdfs-namenode`` and ``hdfs-datanode`` for the launcher, in start order; the NameNode
    configures and formats on first start, the DataNode is ready once HDFS takes writes."""
    from medusa.stack.components import Component

    namenode, datanode = hdfs.commands()
    return [
        Component(name=namenode.name, command=namenode.command, env=namenode.env,
                  endpoint=hdfs.uri, ready=hdfs.namenode_ready, prepare=hdfs.prepare),
        Component(name=datanode.name, command=datanode.command, env=datanode.env,
                  endpoint=f"127.0.0.1:{hdfs.ports.datanode_data}", ready=hdfs.ready,
                  prepare=hdfs.configure),
    ]
