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

/// A handle on a load balancer's backends, for a node that joins it while it boots.
#[derive(Clone, Debug)]
pub struct Backends(Arc<Mutex<Vec<SocketAddr>>>);

impl Backends {
    pub fn add(&self, backend: SocketAddr) {
        let mut backends = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        if !backends.contains(&backend) {
            backends.push(backend);
        }
    }
}

/// A TCP load balancer: connections to its address go to the first backend that accepts, starting with
/// the next one after the last used.
pub struct LoadBalancer {
    address: SocketAddr,
    backends: Arc<Mutex<Vec<SocketAddr>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for LoadBalancer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl LoadBalancer {
    pub async fn start(ip: Ipv4Addr, preferred_port: u16) -> std::io::Result<Self> {
        let listener = match TcpListener::bind((ip, preferred_port)).await {
            Ok(l) => l,
            Err(_) => TcpListener::bind((ip, 0)).await?,
        };
        let address = listener.local_addr()?;
        let backends: Arc<Mutex<Vec<SocketAddr>>> = Arc::default();
        let task = tokio::spawn(serve(listener, backends.clone()));
        Ok(Self {
            address,
            backends,
            task,
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
        self.backends
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .retain(|b| *b != backend);
    }

    pub fn backends(&self) -> Vec<SocketAddr> {
        self.backends
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

async fn serve(listener: TcpListener, backends: Arc<Mutex<Vec<SocketAddr>>>) {
    let turn = Arc::new(AtomicU32::new(0));
    loop {
        let Ok((mut inbound, _)) = listener.accept().await else {
            continue;
        };
        let backends = backends.clone();
        let turn = turn.clone();
        tokio::spawn(async move {
            let candidates = backends
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .clone();
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
}
