//! Loopback addresses for simulated nodes and load balancers, and the per-cluster TCP load balancer in
//! front of the control-plane nodes' API servers.

use std::net::{Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::net::{TcpListener, TcpStream};

/// Hands out addresses of one `127.B.0.0/16`, picked at random so that simulators running side by side
/// (parallel tests) do not collide.
pub struct Addresses {
    second_octet: u8,
    next: AtomicU32,
}

impl Addresses {
    pub fn new() -> Self {
        use std::hash::{BuildHasher, RandomState};
        let random = RandomState::new().hash_one(std::time::SystemTime::now());
        Self {
            // 127.0.0.0/16 is where everything else on the machine listens.
            second_octet: 16 + (random % 230) as u8,
            next: AtomicU32::new(0),
        }
    }

    /// The next unused address.
    pub fn next(&self) -> Ipv4Addr {
        let n = self.next.fetch_add(1, Ordering::Relaxed);
        Ipv4Addr::new(127, self.second_octet, (n / 250) as u8, (n % 250 + 2) as u8)
    }
}

impl Default for Addresses {
    fn default() -> Self {
        Self::new()
    }
}

/// The address kube-apiserver or etcd should listen on: `preferred` on `ip` when free, else a free port.
pub fn port_on(ip: Ipv4Addr, preferred: u16) -> std::io::Result<u16> {
    if std::net::TcpListener::bind((ip, preferred)).is_ok() {
        return Ok(preferred);
    }
    Ok(std::net::TcpListener::bind((ip, 0))?.local_addr()?.port())
}

/// How often the load balancer checks each backend: a TCP connection, as a cloud's load balancer makes
/// (Octavia's and AWS's default monitors for an API server's pool are TCP).
const CHECK_INTERVAL: Duration = Duration::from_secs(1);
/// How long a check's connection may take.
const CHECK_TIMEOUT: Duration = Duration::from_secs(1);
/// Failed checks in a row after which a backend leaves the pool: a stopped API server is out within
/// about three seconds. One check that succeeds brings it back.
const FALL: u32 = 2;

/// A backend and what its checks found.
#[derive(Clone, Copy, Debug)]
struct Backend {
    address: SocketAddr,
    /// In the pool. A new backend is not until its first check succeeds.
    healthy: bool,
    failures: u32,
}

type Pool = Arc<Mutex<Vec<Backend>>>;

fn lock(pool: &Pool) -> std::sync::MutexGuard<'_, Vec<Backend>> {
    pool.lock().unwrap_or_else(PoisonError::into_inner)
}

/// A handle on a load balancer's backends, for a node that joins it while it boots.
#[derive(Clone, Debug)]
pub struct Backends(Pool);

impl Backends {
    pub fn add(&self, backend: SocketAddr) {
        let mut backends = lock(&self.0);
        if !backends.iter().any(|b| b.address == backend) {
            backends.push(Backend {
                address: backend,
                healthy: false,
                failures: 0,
            });
        }
    }
}

/// A TCP load balancer that health-checks its backends ([`CHECK_INTERVAL`], [`FALL`]): connections go to
/// the first healthy backend that accepts, starting with the next one after the last used; while none
/// is healthy (the first API server coming up), to any that accepts.
pub struct LoadBalancer {
    address: SocketAddr,
    backends: Pool,
    tasks: [tokio::task::JoinHandle<()>; 2],
}

impl Drop for LoadBalancer {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}

impl LoadBalancer {
    pub async fn start(ip: Ipv4Addr, preferred_port: u16) -> std::io::Result<Self> {
        let listener = match TcpListener::bind((ip, preferred_port)).await {
            Ok(l) => l,
            Err(_) => TcpListener::bind((ip, 0)).await?,
        };
        let address = listener.local_addr()?;
        let backends: Pool = Arc::default();
        let tasks = [
            tokio::spawn(serve(listener, backends.clone())),
            tokio::spawn(check(backends.clone())),
        ];
        Ok(Self {
            address,
            backends,
            tasks,
        })
    }

    pub fn address(&self) -> SocketAddr {
        self.address
    }

    pub fn add_backend(&self, backend: SocketAddr) {
        self.handle().add(backend);
    }

    pub fn handle(&self) -> Backends {
        Backends(self.backends.clone())
    }

    pub fn remove_backend(&self, backend: SocketAddr) {
        lock(&self.backends).retain(|b| b.address != backend);
    }

    /// Every registered backend, healthy or not.
    pub fn backends(&self) -> Vec<SocketAddr> {
        lock(&self.backends).iter().map(|b| b.address).collect()
    }

    /// The backends in the pool: those whose checks pass.
    pub fn healthy(&self) -> Vec<SocketAddr> {
        lock(&self.backends)
            .iter()
            .filter(|b| b.healthy)
            .map(|b| b.address)
            .collect()
    }
}

/// Checks every backend each [`CHECK_INTERVAL`], all at once.
async fn check(pool: Pool) {
    loop {
        let addresses: Vec<SocketAddr> = lock(&pool).iter().map(|b| b.address).collect();
        let results = futures::future::join_all(addresses.into_iter().map(|address| async move {
            let connect = tokio::time::timeout(CHECK_TIMEOUT, TcpStream::connect(address)).await;
            (address, matches!(connect, Ok(Ok(_))))
        }))
        .await;
        {
            let mut backends = lock(&pool);
            for (address, up) in results {
                let Some(backend) = backends.iter_mut().find(|b| b.address == address) else {
                    continue;
                };
                if up {
                    backend.failures = 0;
                    backend.healthy = true;
                } else {
                    backend.failures += 1;
                    if backend.failures >= FALL {
                        backend.healthy = false;
                    }
                }
            }
        }
        tokio::time::sleep(CHECK_INTERVAL).await;
    }
}

async fn serve(listener: TcpListener, backends: Pool) {
    let turn = Arc::new(AtomicU32::new(0));
    loop {
        let Ok((mut inbound, _)) = listener.accept().await else {
            continue;
        };
        let backends = backends.clone();
        let turn = turn.clone();
        tokio::spawn(async move {
            let candidates: Vec<SocketAddr> = {
                let all = lock(&backends);
                let healthy: Vec<SocketAddr> = all
                    .iter()
                    .filter(|b| b.healthy)
                    .map(|b| b.address)
                    .collect();
                if healthy.is_empty() {
                    all.iter().map(|b| b.address).collect()
                } else {
                    healthy
                }
            };
            if candidates.is_empty() {
                return;
            }
            let start = turn.fetch_add(1, Ordering::Relaxed) as usize;
            for i in 0..candidates.len() {
                let backend = candidates[(start + i) % candidates.len()];
                let connect =
                    tokio::time::timeout(Duration::from_secs(1), TcpStream::connect(backend));
                if let Ok(Ok(mut outbound)) = connect.await {
                    let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                    return;
                }
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    #[test]
    fn addresses_stay_in_one_loopback_range() {
        let addresses = Addresses::new();
        let a = addresses.next();
        let b = addresses.next();
        assert_ne!(a, b);
        assert!(a.is_loopback() && b.is_loopback());
        assert_eq!(a.octets()[1], b.octets()[1]);
    }

    #[tokio::test]
    async fn connections_skip_a_backend_that_is_gone() {
        let live = TcpListener::bind(("127.0.0.1", 0)).await.unwrap();
        let live_addr = live.local_addr().unwrap();
        let dead_addr = {
            let l = std::net::TcpListener::bind(("127.0.0.1", 0)).unwrap();
            l.local_addr().unwrap()
        };
        tokio::spawn(async move {
            while let Ok((mut s, _)) = live.accept().await {
                let _ = s.write_all(b"live").await;
            }
        });
        let lb = LoadBalancer::start(Ipv4Addr::LOCALHOST, 0).await.unwrap();
        lb.add_backend(dead_addr);
        lb.add_backend(live_addr);
        for _ in 0..3 {
            let mut s = TcpStream::connect(lb.address()).await.unwrap();
            let mut buf = String::new();
            s.read_to_string(&mut buf).await.unwrap();
            assert_eq!(buf, "live");
        }
        lb.remove_backend(live_addr);
        assert_eq!(lb.backends(), vec![dead_addr]);
    }

    /// Answers each connection with `name` until the listener is dropped (the task aborted).
    fn answering(listener: TcpListener, name: &'static str) -> tokio::task::JoinHandle<()> {
        tokio::spawn(async move {
            while let Ok((mut s, _)) = listener.accept().await {
                let _ = s.write_all(name.as_bytes()).await;
            }
        })
    }

    async fn ask(lb: &LoadBalancer) -> String {
        let mut s = TcpStream::connect(lb.address()).await.unwrap();
        let mut buf = String::new();
        let _ = s.read_to_string(&mut buf).await;
        buf
    }

    async fn wait_healthy(lb: &LoadBalancer, want: &[SocketAddr]) {
        let deadline = tokio::time::Instant::now() + 4 * CHECK_INTERVAL * FALL;
        let mut want = want.to_vec();
        want.sort();
        loop {
            let mut healthy = lb.healthy();
            healthy.sort();
            if healthy == want {
                return;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "healthy {healthy:?}, want {want:?}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// A backend that stops listening leaves the pool within its checks (no connection is offered to
    /// it any more, even one that would find it first), and comes back once it listens again; while no
    /// backend is healthy yet, connections go to any that accepts.
    #[tokio::test]
    async fn a_stopped_backend_leaves_the_pool_and_comes_back() {
        let a = TcpListener::bind(("127.0.0.1", 0)).await.unwrap();
        let b = TcpListener::bind(("127.0.0.1", 0)).await.unwrap();
        let (a_addr, b_addr) = (a.local_addr().unwrap(), b.local_addr().unwrap());
        let lb = LoadBalancer::start(Ipv4Addr::LOCALHOST, 0).await.unwrap();
        let a_task = answering(a, "a");
        lb.add_backend(a_addr);
        // Before any check: open to whichever accepts.
        assert_eq!(ask(&lb).await, "a");
        let b_task = answering(b, "b");
        lb.add_backend(b_addr);
        wait_healthy(&lb, &[a_addr, b_addr]).await;

        b_task.abort();
        let _ = b_task.await;
        wait_healthy(&lb, &[a_addr]).await;
        for _ in 0..4 {
            assert_eq!(ask(&lb).await, "a");
        }

        let b = TcpListener::bind(b_addr).await.unwrap();
        let _b_task = answering(b, "b");
        wait_healthy(&lb, &[a_addr, b_addr]).await;
        let answers: Vec<String> = futures::future::join_all((0..4).map(|_| ask(&lb))).await;
        assert!(answers.iter().any(|x| x == "b"), "{answers:?}");
        a_task.abort();
    }
}
