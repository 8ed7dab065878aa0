//! The handshake that opens every node-to-node connection: both ends prove they hold the
//! cluster's shared secret, without sending it, with HMAC-SHA256 over fresh random nonces.
//!
//! 1. client → server: `Hello { version, cluster, node, client_nonce }`
//! 2. server → client: `Challenge { server_nonce, proof }`, proof = HMAC(secret, "server" ‖
//!    cluster ‖ client_nonce ‖ server_nonce): the server knows the secret.
//! 3. client → server: `Proof { proof }`, proof = HMAC(secret, "client" ‖ cluster ‖
//!    server_nonce ‖ client_nonce ‖ node): the client knows it, for this connection only.
//! 4. server → client: `Verdict::Welcome`, or `Verdict::Refused(reason)` and the connection
//!    closes.
//!
//! Invariants: proofs are compared in constant time (`ring::hmac::verify`); a nonce is 32 fresh
//! random bytes per connection, so a recorded handshake does not open another; a peer of
//! another cluster name or protocol version is refused before any proof is computed for it.

use super::tls::{NodeTls, PeerStream};
use super::{read_frame_within, write_frame, TransportError, MAX_HANDSHAKE_FRAME};
use ring::hmac;
use ring::rand::{SecureRandom, SystemRandom};
use serde::{Deserialize, Serialize};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;

/// Version of the node-to-node protocol (handshake and RPC messages).
pub const PROTOCOL_VERSION: u32 = 1;

/// What a node needs to join its cluster's connections: the cluster's name and shared secret,
/// and its TLS identity where the cluster uses TLS.
#[derive(Clone)]
pub struct ClusterAuth {
    cluster: String,
    key: hmac::Key,
    tls: Option<NodeTls>,
}

impl std::fmt::Debug for ClusterAuth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClusterAuth")
            .field("cluster", &self.cluster)
            .field("tls", &self.tls.is_some())
            .finish_non_exhaustive()
    }
}

#[derive(Serialize, Deserialize, Debug)]
struct Hello {
    version: u32,
    cluster: String,
    node: u64,
    client_nonce: [u8; 32],
}

#[derive(Serialize, Deserialize, Debug)]
struct Challenge {
    server_nonce: [u8; 32],
    proof: Vec<u8>,
}

#[derive(Serialize, Deserialize, Debug)]
struct Proof {
    proof: Vec<u8>,
}

#[derive(Serialize, Deserialize, Debug)]
enum Verdict {
    Welcome,
    Refused(String),
}

fn nonce() -> Result<[u8; 32], TransportError> {
    let mut n = [0u8; 32];
    SystemRandom::new()
        .fill(&mut n)
        .map_err(|_| TransportError::Refused("no randomness for a nonce".into()))?;
    Ok(n)
}

impl ClusterAuth {
    /// The credentials of cluster `cluster` with shared secret `secret` (at least 16 bytes).
    pub fn new(cluster: &str, secret: &[u8]) -> Result<Self, TransportError> {
        if secret.len() < 16 {
            return Err(TransportError::Refused(format!(
                "a cluster secret of {} bytes is too short (16 at least)",
                secret.len()
            )));
        }
        Ok(ClusterAuth {
            cluster: cluster.to_string(),
            key: hmac::Key::new(hmac::HMAC_SHA256, secret),
            tls: None,
        })
    }

    /// Connections run over TLS with `tls` (both ends must use TLS with the same CA).
    pub fn with_tls(mut self, tls: NodeTls) -> Self {
        self.tls = Some(tls);
        self
    }

    /// Opens a connection on `tcp` to the peer dialled as `addr`, as node `node`: TLS first
    /// where configured, then the secret handshake inside it.
    pub(crate) async fn open(&self, tcp: TcpStream, addr: &str, node: u64) -> Result<PeerStream, TransportError> {
        let mut stream: PeerStream = match &self.tls {
            Some(tls) => tls.connect(tcp, addr).await?,
            None => Box::new(tcp),
        };
        self.connect(&mut stream, node).await?;
        Ok(stream)
    }

    /// Admits a connection accepted on `tcp`: TLS first where configured, then the secret
    /// handshake; returns the stream and the peer's node id.
    pub(crate) async fn admit(&self, tcp: TcpStream) -> Result<(PeerStream, u64), TransportError> {
        let mut stream: PeerStream = match &self.tls {
            Some(tls) => tls.accept(tcp).await?,
            None => Box::new(tcp),
        };
        let peer = self.accept(&mut stream).await?;
        Ok((stream, peer))
    }

    /// The cluster's name.
    pub fn cluster(&self) -> &str {
        &self.cluster
    }

    /// The bytes a proof signs: the role, the cluster's name (length-prefixed), both nonces in
    /// the role's order, and the client's node id for the client's proof.
    fn proof_message(&self, role: &[u8], first: &[u8; 32], second: &[u8; 32], node: Option<u64>) -> Vec<u8> {
        let mut msg = Vec::with_capacity(128);
        msg.extend_from_slice(role);
        msg.extend_from_slice(&(self.cluster.len() as u64).to_le_bytes());
        msg.extend_from_slice(self.cluster.as_bytes());
        msg.extend_from_slice(first);
        msg.extend_from_slice(second);
        if let Some(node) = node {
            msg.extend_from_slice(&node.to_le_bytes());
        }
        msg
    }

    fn proof(&self, role: &[u8], first: &[u8; 32], second: &[u8; 32], node: Option<u64>) -> hmac::Tag {
        hmac::sign(&self.key, &self.proof_message(role, first, second, node))
    }

    /// Checks `proof` in constant time.
    fn verify(&self, role: &[u8], first: &[u8; 32], second: &[u8; 32], node: Option<u64>, proof: &[u8]) -> bool {
        hmac::verify(&self.key, &self.proof_message(role, first, second, node), proof).is_ok()
    }

    /// The client side of the handshake, as node `node`.
    pub(crate) async fn connect(
        &self,
        io: &mut (impl AsyncRead + AsyncWrite + Unpin),
        node: u64,
    ) -> Result<(), TransportError> {
        let client_nonce = nonce()?;
        let hello = Hello {
            version: PROTOCOL_VERSION,
            cluster: self.cluster.clone(),
            node,
            client_nonce,
        };
        write_frame(io, &hello).await?;
        let challenge: Challenge = match read_frame_within::<Result<Challenge, String>>(io, MAX_HANDSHAKE_FRAME).await?
        {
            Ok(c) => c,
            Err(reason) => return Err(TransportError::Refused(reason)),
        };
        if !self.verify(
            b"server",
            &client_nonce,
            &challenge.server_nonce,
            None,
            &challenge.proof,
        ) {
            return Err(TransportError::Refused(
                "the server does not know the cluster secret".into(),
            ));
        }
        let proof = self.proof(b"client", &challenge.server_nonce, &client_nonce, Some(node));
        write_frame(
            io,
            &Proof {
                proof: proof.as_ref().to_vec(),
            },
        )
        .await?;
        match read_frame_within::<Verdict>(io, MAX_HANDSHAKE_FRAME).await? {
            Verdict::Welcome => Ok(()),
            Verdict::Refused(reason) => Err(TransportError::Refused(reason)),
        }
    }

    /// The server side of the handshake; returns the peer's node id.
    pub(crate) async fn accept(&self, io: &mut (impl AsyncRead + AsyncWrite + Unpin)) -> Result<u64, TransportError> {
        let hello: Hello = read_frame_within(io, MAX_HANDSHAKE_FRAME).await?;
        let refusal = if hello.version != PROTOCOL_VERSION {
            Some(format!(
                "protocol version {} (this node speaks {PROTOCOL_VERSION})",
                hello.version
            ))
        } else if hello.cluster != self.cluster {
            Some(format!(
                "cluster {:?} (this node belongs to {:?})",
                hello.cluster, self.cluster
            ))
        } else {
            None
        };
        if let Some(reason) = refusal {
            write_frame(io, &Err::<Challenge, String>(reason.clone())).await?;
            return Err(TransportError::Refused(reason));
        }
        let server_nonce = nonce()?;
        let proof = self.proof(b"server", &hello.client_nonce, &server_nonce, None);
        let challenge = Challenge {
            server_nonce,
            proof: proof.as_ref().to_vec(),
        };
        write_frame(io, &Ok::<Challenge, String>(challenge)).await?;
        let answer: Proof = read_frame_within(io, MAX_HANDSHAKE_FRAME).await?;
        if !self.verify(
            b"client",
            &server_nonce,
            &hello.client_nonce,
            Some(hello.node),
            &answer.proof,
        ) {
            let reason = format!("node {} does not know the cluster secret", hello.node);
            write_frame(io, &Verdict::Refused(reason.clone())).await?;
            return Err(TransportError::Refused(reason));
        }
        write_frame(io, &Verdict::Welcome).await?;
        Ok(hello.node)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::transport::{read_frame, write_frame};

    fn auth(cluster: &str, secret: &[u8; 32]) -> ClusterAuth {
        ClusterAuth::new(cluster, secret).unwrap()
    }

    #[tokio::test]
    async fn members_get_in_and_the_server_refuses_a_wrong_client_proof() {
        let (mut c, mut s) = tokio::io::duplex(1 << 16);
        let a = auth("c", &[1; 32]);
        let (client, server) = tokio::join!(a.connect(&mut c, 7), a.accept(&mut s));
        client.unwrap();
        assert_eq!(server.unwrap(), 7);

        // A client that ignores the server's proof and answers with a forged one: the server
        // itself must refuse it (a client-side check alone would not show this).
        let (mut c, mut s) = tokio::io::duplex(1 << 16);
        let server = tokio::spawn(async move { auth("c", &[1; 32]).accept(&mut s).await });
        let hello = Hello {
            version: PROTOCOL_VERSION,
            cluster: "c".into(),
            node: 9,
            client_nonce: [5; 32],
        };
        write_frame(&mut c, &hello).await.unwrap();
        let challenge: Result<Challenge, String> = read_frame(&mut c).await.unwrap();
        let challenge = challenge.unwrap();
        // Reflecting the server's own proof back is refused too (the roles differ).
        write_frame(&mut c, &Proof { proof: challenge.proof }).await.unwrap();
        let verdict: Verdict = read_frame(&mut c).await.unwrap();
        assert!(matches!(verdict, Verdict::Refused(_)));
        assert!(matches!(server.await.unwrap(), Err(TransportError::Refused(_))));

        // Another secret or another cluster: refused on both sides.
        for (other, what) in [(auth("c", &[2; 32]), "secret"), (auth("d", &[1; 32]), "cluster")] {
            let (c, s) = tokio::io::duplex(1 << 16);
            let a = a.clone();
            // Each side hangs up when it is done, as a socket would.
            let server = tokio::spawn(async move {
                let mut s = s;
                a.accept(&mut s).await
            });
            let client = async move {
                let mut c = c;
                other.connect(&mut c, 8).await
            }
            .await;
            assert!(client.is_err(), "client with another {what} got in");
            assert!(server.await.unwrap().is_err(), "server accepted another {what}");
        }
        assert!(ClusterAuth::new("c", b"short").is_err());
    }

    #[tokio::test]
    async fn a_hello_over_the_handshake_limit_is_refused_unread() {
        let (mut c, mut s) = tokio::io::duplex(1 << 16);
        let big = Hello {
            version: PROTOCOL_VERSION,
            cluster: "x".repeat(MAX_HANDSHAKE_FRAME),
            node: 1,
            client_nonce: [0; 32],
        };
        let writer = tokio::spawn(async move {
            let _ = write_frame(&mut c, &big).await;
        });
        let refused = auth("c", &[1; 32]).accept(&mut s).await;
        assert!(matches!(refused, Err(TransportError::Malformed(_))), "{refused:?}");
        drop(s);
        writer.await.unwrap();
    }
}
