//! Helpers shared by the cluster tests.

#![allow(dead_code)]

use openraft::Raft;
use riptide_cluster::{TypeConfig, WriteOp, WriteSet};
use std::time::Duration;

/// A write set putting `key` (big-endian) into table `kv`.
pub fn put(key: u32) -> WriteSet {
    WriteSet {
        ops: vec![WriteOp::Put {
            table: "kv".into(),
            key: key.to_be_bytes().to_vec(),
            value: format!("v{key}").into_bytes(),
        }],
    }
}

/// Waits (at most 20 s) until `raft` applied at least `index`.
pub async fn applied(raft: &Raft<TypeConfig>, index: u64) {
    raft.wait(Some(Duration::from_secs(20)))
        .metrics(|m| m.last_applied.map(|l| l.index) >= Some(index), "applied")
        .await
        .unwrap();
}

/// A certificate authority for TLS tests and the PEM of its certificate.
pub struct TestCa {
    pub pem: String,
    cert: rcgen::Certificate,
    key: rcgen::KeyPair,
}

impl TestCa {
    /// A fresh CA.
    pub fn new() -> TestCa {
        let key = rcgen::KeyPair::generate().unwrap();
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, "riptide test CA");
        let cert = params.self_signed(&key).unwrap();
        TestCa {
            pem: cert.pem(),
            cert,
            key,
        }
    }

    /// A node certificate naming `names` (IP addresses or host names) and its key, as PEM.
    pub fn node(&self, names: &[&str]) -> (String, String) {
        let key = rcgen::KeyPair::generate().unwrap();
        let names: Vec<String> = names.iter().map(|n| n.to_string()).collect();
        let mut params = rcgen::CertificateParams::new(names).unwrap();
        params.extended_key_usages = vec![
            rcgen::ExtendedKeyUsagePurpose::ServerAuth,
            rcgen::ExtendedKeyUsagePurpose::ClientAuth,
        ];
        let cert = params.signed_by(&key, &self.cert, &self.key).unwrap();
        (cert.pem(), key.serialize_pem())
    }

    /// A node's TLS identity under this CA, naming `names`.
    pub fn tls(&self, names: &[&str]) -> riptide_cluster::transport::NodeTls {
        self.tls_trusting(self, names)
    }

    /// A certificate of this CA naming `names`, on a node that trusts `trusted`'s CA.
    pub fn tls_trusting(&self, trusted: &TestCa, names: &[&str]) -> riptide_cluster::transport::NodeTls {
        let (cert, key) = self.node(names);
        riptide_cluster::transport::NodeTls::from_pem(cert.as_bytes(), key.as_bytes(), trusted.pem.as_bytes()).unwrap()
    }
}
