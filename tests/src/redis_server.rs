//! A real `redis-server` on a free loopback port, in a directory of its own,
//! stopped when dropped. It can be restarted on the same port and data
//! directory, with AOF on, to test what survives a restart.

use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A Redis a test runs against: one server or a cluster.
pub trait RedisUnderTest {
    /// What `FLOTILLA_REDIS_URL` is set to.
    fn url(&self) -> String;
    /// Kills every server (SIGKILL) and starts it again on the same data.
    fn restart(&mut self);
}

/// A running redis-server owned by one test.
pub struct RedisServer {
    pub port: u16,
    dir: PathBuf,
    aof: bool,
    cluster: bool,
    child: Option<Child>,
}

impl RedisServer {
    /// Starts a server with no persistence.
    pub fn start() -> Self {
        Self::launch(false)
    }

    /// Starts a server that appends every write to an AOF (`appendfsync always`).
    pub fn start_with_aof() -> Self {
        Self::launch(true)
    }

    fn launch(aof: bool) -> Self {
        Self::launch_with(aof, false)
    }

    /// Starts an empty cluster node (cluster mode on, no slots yet).
    pub fn start_cluster_node() -> Self {
        Self::launch_with(true, true)
    }

    /// A new server on a free port. The port is free when picked but may be
    /// taken before the server binds it (by another test's server, or, for
    /// a cluster node, its bus port `port + 10000`): a server that exits
    /// before answering is started again on another port, a few times.
    fn launch_with(aof: bool, cluster: bool) -> Self {
        for _ in 0..5 {
            let port = if cluster { free_cluster_port() } else { free_port() };
            let dir = std::env::temp_dir().join(format!("flotilla-redis-{port}-{}", std::process::id()));
            std::fs::create_dir_all(&dir).expect("redis data dir");
            let mut server = Self { port, dir, aof, cluster, child: None };
            match server.start_child() {
                Started::Ready => return server,
                Started::Exited => continue,
            }
        }
        panic!("redis-server exited before answering on five free ports");
    }

    fn spawn(&mut self) {
        if let Started::Exited = self.start_child() {
            panic!("redis-server on port {} exited before answering", self.port);
        }
    }

    fn start_child(&mut self) -> Started {
        let mut cmd = Command::new("redis-server");
        cmd.arg("--port")
            .arg(self.port.to_string())
            .arg("--bind")
            .arg("127.0.0.1")
            .arg("--dir")
            .arg(&self.dir)
            .arg("--save")
            .arg("")
            .arg("--maxmemory-policy")
            .arg("noeviction");
        if self.cluster {
            cmd.args(["--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf", "--cluster-node-timeout", "2000"]);
        }
        if self.aof {
            cmd.args(["--appendonly", "yes", "--appendfsync", "always"]);
        } else {
            cmd.args(["--appendonly", "no"]);
        }
        let child =
            cmd.stdout(Stdio::null()).stderr(Stdio::null()).spawn().expect("redis-server is installed (scripts/setup.sh)");
        self.child = Some(child);
        self.wait_ready()
    }

    /// Waits for a `PONG`, or for the server to exit first.
    fn wait_ready(&mut self) -> Started {
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Some(Ok(Some(_))) = self.child.as_mut().map(Child::try_wait) {
                self.child = None;
                return Started::Exited;
            }
            if let Ok(client) = redis::Client::open(self.url()) {
                if let Ok(mut conn) = client.get_connection_with_timeout(Duration::from_millis(200)) {
                    let pong: redis::RedisResult<String> = redis::cmd("PING").query(&mut conn);
                    if pong.is_ok() {
                        return Started::Ready;
                    }
                }
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        panic!("redis-server on port {} did not become ready", self.port);
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// Runs `redis-cli` against this server and returns what it printed.
    pub fn cli(&self, args: &[&str]) -> String {
        let out = Command::new("redis-cli").arg("-p").arg(self.port.to_string()).args(args).output().expect("redis-cli runs");
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// `calls` of each command in `INFO commandstats` (the commands scripts
    /// call counted under their own names), since the start or the last
    /// `CONFIG RESETSTAT`.
    pub fn command_calls(&self) -> std::collections::BTreeMap<String, u64> {
        self.cli(&["INFO", "commandstats"])
            .lines()
            .filter_map(|line| {
                let (name, stats) = line.trim().strip_prefix("cmdstat_")?.split_once(':')?;
                let calls = stats.split(',').find_map(|kv| kv.strip_prefix("calls="))?.parse().ok()?;
                Some((name.to_owned(), calls))
            })
            .collect()
    }

    /// A plain connection for assertions.
    pub fn connection(&self) -> redis::Connection {
        redis::Client::open(self.url()).and_then(|c| c.get_connection()).expect("connect to test redis")
    }

    /// Kills the server (SIGKILL: nothing is flushed beyond what AOF holds).
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            child.kill().ok();
            child.wait().ok();
        }
    }

    /// Kills the server and starts it again on the same port and data.
    pub fn restart(&mut self) {
        self.kill();
        self.spawn();
    }
}

impl RedisUnderTest for RedisServer {
    fn url(&self) -> String {
        RedisServer::url(self)
    }

    fn restart(&mut self) {
        RedisServer::restart(self);
    }
}

/// A local Redis Cluster of three masters, each with AOF, slots spread by
/// `redis-cli --cluster create`.
pub struct RedisCluster {
    pub nodes: Vec<RedisServer>,
}

impl RedisCluster {
    pub fn start() -> Self {
        let nodes: Vec<RedisServer> = (0..3).map(|_| RedisServer::start_cluster_node()).collect();
        let addrs: Vec<String> = nodes.iter().map(|n| format!("127.0.0.1:{}", n.port)).collect();
        let status = Command::new("redis-cli")
            .arg("--cluster")
            .arg("create")
            .args(&addrs)
            .args(["--cluster-replicas", "0", "--cluster-yes"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .expect("redis-cli runs");
        assert!(status.success(), "redis-cli --cluster create failed");
        let cluster = Self { nodes };
        cluster.wait_ok();
        cluster
    }

    fn wait_ok(&self) {
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline {
            if self.nodes.iter().all(|n| n.cli(&["cluster", "info"]).contains("cluster_state:ok")) {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!("the cluster did not reach cluster_state:ok");
    }
}

impl RedisUnderTest for RedisCluster {
    fn url(&self) -> String {
        self.nodes.iter().map(RedisServer::url).collect::<Vec<_>>().join(",")
    }

    fn restart(&mut self) {
        for node in &mut self.nodes {
            node.kill();
        }
        for node in &mut self.nodes {
            node.spawn();
        }
        self.wait_ok();
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.kill();
        std::fs::remove_dir_all(&self.dir).ok();
    }
}

/// A loopback port nobody listens on now.
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).map(|a| a.port()).expect("free port")
}

/// A free port whose cluster bus port (`port + 10000`) is free too.
fn free_cluster_port() -> u16 {
    for _ in 0..100 {
        let port = free_port();
        if port <= u16::MAX - 10000 && TcpListener::bind(("127.0.0.1", port + 10000)).is_ok() {
            return port;
        }
    }
    panic!("no free port with a free cluster bus port in 100 tries");
}

/// How starting a server's process went.
enum Started {
    Ready,
    /// It exited before answering (its port was taken meanwhile).
    Exited,
}
