//! A TCP proxy the fault tests put between the stack and PostgreSQL or
//! RabbitMQ. `cut()` drops every open connection and refuses new ones (each
//! is accepted and closed at once, as a dead network path or a restarting
//! server looks to a client) until `restore()`. `stall()` keeps every
//! connection open but forwards nothing more, as a broker that stopped
//! answering looks. The machine's shared services are never touched.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinHandle;

pub struct FaultProxy {
    pub addr: SocketAddr,
    inner: Arc<Inner>,
    accept: JoinHandle<()>,
}

struct Inner {
    target: SocketAddr,
    up: AtomicBool,
    /// Bumped by every cut: open connections end when it changes.
    cuts: watch::Sender<u64>,
    /// Bumped by every stall: the connections open then go silent.
    stalls: watch::Sender<u64>,
    accepted: AtomicU64,
    refused: AtomicU64,
}

impl FaultProxy {
    /// Listens on a free loopback port and forwards to `target`.
    pub async fn start(target: &str) -> FaultProxy {
        let target: SocketAddr = target.parse().expect("a socket address");
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("binding the proxy");
        let addr = listener.local_addr().expect("proxy address");
        let inner = Arc::new(Inner {
            target,
            up: AtomicBool::new(true),
            cuts: watch::channel(0).0,
            stalls: watch::channel(0).0,
            accepted: AtomicU64::new(0),
            refused: AtomicU64::new(0),
        });
        let accept = tokio::spawn(accept_loop(listener, inner.clone()));
        FaultProxy {
            addr,
            inner,
            accept,
        }
    }

    /// In front of the tests' PostgreSQL server (`UNIGEN_TEST_DATABASE_URL`).
    pub async fn postgres() -> FaultProxy {
        Self::start(&host_port(&crate::env::postgres_admin_url())).await
    }

    /// In front of the tests' RabbitMQ (`UNIGEN_TEST_AMQP_URL`).
    pub async fn rabbitmq() -> FaultProxy {
        Self::start(&host_port(&crate::env::amqp_url())).await
    }

    /// Closes every open connection and refuses new ones until [`restore`].
    ///
    /// [`restore`]: FaultProxy::restore
    pub fn cut(&self) {
        self.inner.up.store(false, Ordering::SeqCst);
        self.inner.cuts.send_modify(|n| *n += 1);
    }

    pub fn restore(&self) {
        self.inner.up.store(true, Ordering::SeqCst);
    }

    /// Open connections stay open but carry nothing more (in either
    /// direction) until a [`cut`]; new ones are forwarded as usual.
    ///
    /// [`cut`]: FaultProxy::cut
    pub fn stall(&self) {
        self.inner.stalls.send_modify(|n| *n += 1);
    }

    /// Connections forwarded so far, and connections refused while cut.
    pub fn counts(&self) -> (u64, u64) {
        (
            self.inner.accepted.load(Ordering::Relaxed),
            self.inner.refused.load(Ordering::Relaxed),
        )
    }

    /// `url` with its `host:port` replaced by the proxy's.
    pub fn url_via(&self, url: &str) -> String {
        let (scheme, rest) = url.split_once("://").expect("a URL with a scheme");
        let (authority, path) = rest.split_once('/').unwrap_or((rest, ""));
        let userinfo = authority.rsplit_once('@').map(|(user, _)| user);
        let host = self.addr;
        match userinfo {
            Some(user) => format!("{scheme}://{user}@{host}/{path}"),
            None => format!("{scheme}://{host}/{path}"),
        }
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        self.accept.abort();
        self.cut();
    }
}

/// `host:port` of a URL, as a socket address (`localhost` as 127.0.0.1).
fn host_port(url: &str) -> String {
    let authority = url.split_once("://").map_or(url, |(_, rest)| rest);
    let authority = authority.split('/').next().unwrap_or(authority);
    let host_port = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    host_port.replace("localhost", "127.0.0.1")
}

async fn accept_loop(listener: TcpListener, inner: Arc<Inner>) {
    loop {
        let Ok((client, _)) = listener.accept().await else {
            continue;
        };
        if !inner.up.load(Ordering::SeqCst) {
            inner.refused.fetch_add(1, Ordering::Relaxed);
            drop(client);
            continue;
        }
        inner.accepted.fetch_add(1, Ordering::Relaxed);
        let mut cuts = inner.cuts.subscribe();
        let mut stalls = inner.stalls.subscribe();
        let target = inner.target;
        tokio::spawn(async move {
            let Ok(mut upstream) = TcpStream::connect(target).await else {
                return;
            };
            let mut client = client;
            let _ = client.set_nodelay(true);
            let _ = upstream.set_nodelay(true);
            tokio::select! {
                _ = tokio::io::copy_bidirectional(&mut client, &mut upstream) => {}
                // Both sockets drop here: the client sees its connection die.
                _ = cuts.changed() => {}
                // Both sockets held open, silent, until a cut.
                _ = stalls.changed() => {
                    let _ = cuts.changed().await;
                }
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use super::*;

    async fn echo_server() -> SocketAddr {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            while let Ok((mut socket, _)) = listener.accept().await {
                tokio::spawn(async move {
                    let mut buf = [0u8; 64];
                    while let Ok(n) = socket.read(&mut buf).await {
                        if n == 0 || socket.write_all(&buf[..n]).await.is_err() {
                            break;
                        }
                    }
                });
            }
        });
        addr
    }

    async fn echoes(stream: &mut TcpStream) -> bool {
        let mut buf = [0u8; 4];
        stream.write_all(b"ping").await.is_ok()
            && matches!(stream.read(&mut buf).await, Ok(4))
            && &buf == b"ping"
    }

    #[tokio::test]
    async fn a_cut_ends_open_connections_and_refuses_new_ones_until_restored() {
        let proxy = FaultProxy::start(&echo_server().await.to_string()).await;
        let mut open = TcpStream::connect(proxy.addr).await.unwrap();
        assert!(echoes(&mut open).await);

        proxy.cut();
        let mut buf = [0u8; 4];
        let read = tokio::time::timeout(std::time::Duration::from_secs(2), open.read(&mut buf))
            .await
            .expect("the cut connection ends");
        assert!(matches!(read, Ok(0) | Err(_)), "{read:?}");
        let mut refused = TcpStream::connect(proxy.addr).await.unwrap();
        assert!(!echoes(&mut refused).await);

        proxy.restore();
        let mut fresh = TcpStream::connect(proxy.addr).await.unwrap();
        assert!(echoes(&mut fresh).await);
        assert_eq!(proxy.counts(), (2, 1));
    }

    #[test]
    fn urls_are_rewritten_to_the_proxy_keeping_credentials_and_path() {
        let runtime = tokio::runtime::Runtime::new().unwrap();
        let proxy = runtime.block_on(FaultProxy::start("127.0.0.1:5432"));
        let port = proxy.addr.port();
        assert_eq!(
            proxy.url_via("postgres://postgres@127.0.0.1:5432/unigen_t_1"),
            format!("postgres://postgres@127.0.0.1:{port}/unigen_t_1")
        );
        assert_eq!(
            proxy.url_via("amqp://guest:guest@127.0.0.1:5672/%2f"),
            format!("amqp://guest:guest@127.0.0.1:{port}/%2f")
        );
        drop(runtime);
    }
}
