//! The blackbox crash test with L2 on S3 (moto, started by the test): `riptide stress` children
//! are SIGKILLed at random times, with background compactions uploading L2 extents and the
//! collector deleting replaced ones; each child verifies what it recovered. Afterwards, a
//! reopen reclaims every object no metadata names (crashed uploads, deletions cut short), and
//! `inspect verify` checks every object-tier extent.

use riptide::tier::{ObjectStore, Tier};
use riptide::{Db, Options};
use riptide_s3::moto::Moto;
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

#[test]
fn crash_rounds_with_l2_on_s3_lose_nothing_and_leak_no_object() {
    let moto = Moto::start().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("db");
    let o = Command::new(env!("CARGO_BIN_EXE_riptide"))
        .arg("stress")
        .arg(format!("--db={}", db.display()))
        .args([
            "--duration=10",
            "--keys=3000",
            "--value_min=50",
            "--value_max=400",
            "--crash_rounds=6",
            "--kill_min_ms=300",
            "--kill_max_ms=1500",
            "--sync=true",
            "--object_store=s3://riptide/crash",
            &format!("--object_endpoint={}", moto.endpoint()),
            "--object_delete_grace=0",
            "--extent_cache_size=4194304",
        ])
        .env("AWS_ACCESS_KEY_ID", "testing")
        .env("AWS_SECRET_ACCESS_KEY", "testing")
        .output()
        .expect("run riptide stress");
    let out = format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(o.status.success(), "{out}");
    assert!(out.contains("DONE 6 rounds"), "{out}");

    let store: Arc<dyn ObjectStore> = Arc::new(moto.store("crash").unwrap());
    // No compaction during the check: nothing is retired while it counts.
    let opts = || Options {
        object_store: Some(store.clone()),
        l2_tier: Tier::Object,
        object_delete_grace: Duration::ZERO,
        level0_layer_trigger: 1000,
        level0_extents_trigger: 1000,
        level1_extents_trigger: 1000,
        level1_dynamic_trigger: false,
        level0_slowdown_layers: 1000,
        level0_stop_layers: 1000,
        ..Default::default()
    };
    let d = Db::open(&db, opts()).unwrap();
    let live = d.stats().object_extents as usize;
    assert!(live > 0, "the workload pushed L2 into S3");
    let mut listed = usize::MAX;
    for _ in 0..300 {
        listed = store.list("ext/").unwrap().len();
        if listed == live {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(listed, live, "objects no metadata names are gone after one reopen");
    d.close().unwrap();
    let r = riptide::inspect::verify_with_objects(&riptide::fs::PosixFs, &db, Some(store.as_ref())).unwrap();
    assert!(r.ok(), "{:?}", r.problems);
    assert!(
        r.extents as usize >= live,
        "every object-tier extent was read and checked"
    );
    assert!(
        r.notes.iter().all(|n| !n.contains("no metadata names")),
        "{:?}",
        r.notes
    );
}
