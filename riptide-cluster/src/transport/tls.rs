//! TLS for node-to-node connections (rustls, mutual): where a cluster is given a CA, a node
//! certificate and its key, every connection between nodes (and from `riptide cluster`) is
//! encrypted, and each end proves with its certificate that the cluster's CA issued it. The
//! shared-secret handshake ([`super::auth`]) then runs inside the TLS stream, so a peer needs
//! both the secret and a certificate of the cluster.
//!
//! Invariants:
//! - Both ends verify the other's certificate chain against the cluster's CA only (never the
//!   system's roots). The connecting end also checks that the certificate names the address
//!   it dialled (an IP address SAN for an IP, a DNS SAN for a host name), as any TLS client
//!   does; the accepting end requires a client certificate from the same CA.
//! - The crypto provider is named (ring), not taken from the process default, so a binary that
//!   links another rustls provider elsewhere builds the same configuration.
//! - Bad files (unreadable, no certificate, no key, a key that does not match, a CA that is not
//!   a certificate) are typed errors at start, never a panic.

use super::TransportError;
use std::path::Path;
use std::sync::Arc;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;
use tokio_rustls::rustls::crypto::{ring, CryptoProvider};
use tokio_rustls::rustls::pki_types::pem::PemObject;
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use tokio_rustls::rustls::server::WebPkiClientVerifier;
use tokio_rustls::rustls::{ClientConfig, RootCertStore, ServerConfig};
use tokio_rustls::{TlsAcceptor, TlsConnector};

/// A byte stream to a peer, over TLS or plain TCP.
pub(crate) trait PeerIo: AsyncRead + AsyncWrite + Unpin + Send + Sync {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send + Sync> PeerIo for T {}

/// An open connection to a peer, its handshakes done.
pub(crate) type PeerStream = Box<dyn PeerIo>;

/// A node's TLS identity and the CA it trusts, as client and as server.
#[derive(Clone)]
pub struct NodeTls {
    connector: TlsConnector,
    acceptor: TlsAcceptor,
}

impl std::fmt::Debug for NodeTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NodeTls").finish_non_exhaustive()
    }
}

fn bad(what: &str, e: impl std::fmt::Display) -> TransportError {
    TransportError::Refused(format!("TLS {what}: {e}"))
}

fn read(path: &Path, what: &str) -> Result<Vec<u8>, TransportError> {
    std::fs::read(path).map_err(|e| bad(what, format!("{}: {e}", path.display())))
}

impl NodeTls {
    /// Reads the node's certificate chain, its private key and the cluster's CA certificates
    /// (PEM files).
    pub fn from_pem_files(cert: &Path, key: &Path, ca: &Path) -> Result<Self, TransportError> {
        Self::from_pem(&read(cert, "certificate")?, &read(key, "key")?, &read(ca, "CA")?)
    }

    /// The same from PEM bytes.
    pub fn from_pem(cert: &[u8], key: &[u8], ca: &[u8]) -> Result<Self, TransportError> {
        let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(cert)
            .collect::<Result<_, _>>()
            .map_err(|e| bad("certificate", e))?;
        if chain.is_empty() {
            return Err(bad("certificate", "no certificate in the file"));
        }
        let key = PrivateKeyDer::from_pem_slice(key).map_err(|e| bad("key", e))?;
        let mut roots = RootCertStore::empty();
        let mut cas = 0;
        for c in CertificateDer::pem_slice_iter(ca) {
            roots.add(c.map_err(|e| bad("CA", e))?).map_err(|e| bad("CA", e))?;
            cas += 1;
        }
        if cas == 0 {
            return Err(bad("CA", "no certificate in the file"));
        }
        let roots = Arc::new(roots);
        let provider: Arc<CryptoProvider> = Arc::new(ring::default_provider());
        let client_verifier = WebPkiClientVerifier::builder_with_provider(roots.clone(), provider.clone())
            .build()
            .map_err(|e| bad("CA", e))?;
        let server = ServerConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .map_err(|e| bad("configuration", e))?
            .with_client_cert_verifier(client_verifier)
            .with_single_cert(chain.clone(), key.clone_key())
            .map_err(|e| bad("certificate and key", e))?;
        let client = ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| bad("configuration", e))?
            .with_root_certificates(roots)
            .with_client_auth_cert(chain, key)
            .map_err(|e| bad("certificate and key", e))?;
        Ok(NodeTls {
            connector: TlsConnector::from(Arc::new(client)),
            acceptor: TlsAcceptor::from(Arc::new(server)),
        })
    }

    /// The client side over `tcp`, to the peer dialled as `addr` (`host:port`).
    pub(crate) async fn connect(&self, tcp: TcpStream, addr: &str) -> Result<PeerStream, TransportError> {
        let host = peer_host(addr);
        let name = ServerName::try_from(host.to_string()).map_err(|e| bad("peer name", format!("{host}: {e}")))?;
        let stream = self.connector.connect(name, tcp).await.map_err(handshake_error)?;
        Ok(Box::new(stream))
    }

    /// The server side over `tcp`.
    pub(crate) async fn accept(&self, tcp: TcpStream) -> Result<PeerStream, TransportError> {
        let stream = self.acceptor.accept(tcp).await.map_err(handshake_error)?;
        Ok(Box::new(stream))
    }
}

/// The host part of `host:port`, `[v6]:port` or `[v6%zone]:port` (a zone does not belong to
/// the name a certificate holds).
fn peer_host(addr: &str) -> &str {
    let host = addr.rsplit_once(':').map_or(addr, |(host, _)| host);
    let host = host.strip_prefix('[').and_then(|h| h.strip_suffix(']')).unwrap_or(host);
    host.split_once('%').map_or(host, |(ip, _zone)| ip)
}

/// A failed TLS handshake: what TLS refused (a certificate, a protocol error: rustls reports
/// those as `InvalidData`) is a refusal; a connection reset or closed meanwhile is I/O.
fn handshake_error(e: std::io::Error) -> TransportError {
    if e.kind() == std::io::ErrorKind::InvalidData {
        bad("handshake with the peer", e)
    } else {
        TransportError::Io(e)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A CA's PEM and a certificate for 127.0.0.1 it issued, with its key.
    fn pki() -> (String, String, String) {
        let ca_key = rcgen::KeyPair::generate().unwrap();
        let mut ca = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        ca.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        let ca = ca.self_signed(&ca_key).unwrap();
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = rcgen::CertificateParams::new(vec!["127.0.0.1".to_string()])
            .unwrap()
            .signed_by(&key, &ca, &ca_key)
            .unwrap();
        (ca.pem(), cert.pem(), key.serialize_pem())
    }

    #[test]
    fn the_name_checked_is_the_host_dialled() {
        assert_eq!(peer_host("127.0.0.1:4306"), "127.0.0.1");
        assert_eq!(peer_host("node-a.example:4306"), "node-a.example");
        assert_eq!(peer_host("[::1]:4306"), "::1");
        assert_eq!(peer_host("[fe80::1%eth0]:4306"), "fe80::1");
        for addr in ["127.0.0.1:1", "[::1]:1", "[fe80::1%eth0]:1", "node-a.example:1"] {
            assert!(ServerName::try_from(peer_host(addr).to_string()).is_ok(), "{addr}");
        }
    }

    #[test]
    fn good_files_load_and_bad_ones_are_typed_errors() {
        let (ca, cert, key) = pki();
        NodeTls::from_pem(cert.as_bytes(), key.as_bytes(), ca.as_bytes()).unwrap();
        let other_key = rcgen::KeyPair::generate().unwrap().serialize_pem();
        let cases: [(&str, &str, &str, &str); 6] = [
            ("no certificate", "", &key, &ca),
            (
                "garbage certificate",
                "-----BEGIN CERTIFICATE-----\nnot base64!\n-----END CERTIFICATE-----\n",
                &key,
                &ca,
            ),
            ("no key", &cert, "", &ca),
            ("a key of another certificate", &cert, &other_key, &ca),
            ("no CA", &cert, &key, ""),
            ("a key as the CA", &cert, &key, &key),
        ];
        for (what, c, k, a) in cases {
            let r = NodeTls::from_pem(c.as_bytes(), k.as_bytes(), a.as_bytes());
            assert!(matches!(r, Err(TransportError::Refused(_))), "{what}: {r:?}");
        }
        let missing = Path::new("/nonexistent/riptide-test.pem");
        let e = NodeTls::from_pem_files(missing, missing, missing).unwrap_err();
        assert!(e.to_string().contains("/nonexistent/riptide-test.pem"), "{e}");
    }
}
