//! Three (or more) `PartitionNode`s over loopback, each over its own database, for the tests
//! that drive a replicated engine through its own API.

#![allow(dead_code)]

use riptide::{Db, Options};
use riptide_cluster::transport::ClusterAuth;
use riptide_cluster::{NodeConfig, PartitionNode};
use std::collections::BTreeMap;
use std::time::Duration;

/// The secret of the test clusters.
pub const SECRET: &[u8] = b"a cluster secret of 32 bytes....";

/// One replica: its node and its database.
pub struct Replica {
    pub node: PartitionNode,
    pub db: Db,
    _dir: tempfile::TempDir,
}

/// Starts replica `id` over a fresh database.
pub async fn start(id: u64, auth: &ClusterAuth) -> Replica {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), Options::default()).unwrap();
    let config = NodeConfig::new(id, "127.0.0.1:0".parse().unwrap(), auth.clone());
    let node = PartitionNode::start(&db, config, None).await.unwrap();
    Replica { node, db, _dir: dir }
}

/// Three replicas (ids 1 to 3) of cluster `name`, a group formed by replica 1's bootstrap with
/// the given members (returned, for a second bootstrap).
pub async fn three(name: &str) -> (BTreeMap<u64, Replica>, BTreeMap<u64, String>) {
    let auth = ClusterAuth::new(name, SECRET).unwrap();
    let mut replicas = BTreeMap::new();
    for id in 1..=3 {
        replicas.insert(id, start(id, &auth).await);
    }
    let members: BTreeMap<u64, String> = replicas
        .iter()
        .map(|(id, r)| (*id, r.node.raft_addr().to_string()))
        .collect();
    assert!(replicas[&1].node.bootstrap(members.clone()).await.unwrap());
    (replicas, members)
}

/// The replica all running ones (but `not`) agree leads.
pub async fn leader(replicas: &BTreeMap<u64, Replica>, not: Option<u64>) -> u64 {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        let seen: Vec<Option<u64>> = replicas
            .iter()
            .filter(|(id, _)| Some(**id) != not)
            .map(|(_, r)| r.node.metrics().current_leader)
            .collect();
        if let Some(Some(l)) = seen.first() {
            if seen.iter().all(|s| *s == Some(*l)) && Some(*l) != not {
                return *l;
            }
        }
        assert!(tokio::time::Instant::now() < deadline, "no leader agreed on: {seen:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Runs blocking engine calls off the runtime's workers (a replicated commit waits for them).
pub async fn blocking<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    tokio::task::spawn_blocking(f).await.unwrap()
}

/// Waits until every replica but `not` applied what the leader had applied.
pub async fn caught_up(replicas: &BTreeMap<u64, Replica>, leader_id: u64, not: Option<u64>) {
    let target = replicas[&leader_id].node.metrics().last_applied.map(|l| l.index);
    for (id, r) in replicas {
        if Some(*id) == not {
            continue;
        }
        r.node
            .raft()
            .wait(Some(Duration::from_secs(20)))
            .metrics(|m| m.last_applied.map(|l| l.index) >= target, "caught up")
            .await
            .unwrap();
    }
}
