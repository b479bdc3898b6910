use super::*;

fn machine(name: &str) -> Machine {
    Machine {
        name: name.into(),
        holds_hook: true,
        ready: true,
        ..Machine::default()
    }
}

fn restoring(name: &str, ready: bool) -> Machine {
    Machine {
        restores: true,
        ready,
        ..machine(name)
    }
}

fn deleting(mut m: Machine, holds_hook: bool) -> Machine {
    m.deleting = true;
    m.holds_hook = holds_hook;
    m
}

const REQUESTED: &str = "secret/c1-etcd-snapshot-20261203t030000z";

fn step(staged: Option<&str>, machines: &[Machine]) -> Step {
    next_step(Observed {
        requested: REQUESTED,
        external_etcd: false,
        staged,
        machines,
    })
}

#[test]
fn sources_are_a_secret_or_an_absolute_file() {
    assert_eq!(
        Source::parse(" secret/c1-etcd-snapshot-1 "),
        Ok(Source::Secret("c1-etcd-snapshot-1".into()))
    );
    assert_eq!(
        Source::parse("file:/var/snapshots/ns/c1/etcd-1.db"),
        Ok(Source::File("/var/snapshots/ns/c1/etcd-1.db".into()))
    );
    for (bad, rule) in [
        ("secret/", "`secret/<name>`"),
        ("secret/Upper", "`secret/<name>`"),
        ("file:relative/etcd.db", "absolute path"),
        (
            "file:/var/snapshots/ns/c1/../c2/etcd.db",
            "without `.` or `..`",
        ),
        ("s3://bucket", "`s3://<bucket>/<object>`"),
        ("s3:///etcd.db", "`s3://<bucket>/<object>`"),
        ("s3://bucket/ns/../c2/etcd.db", "`.` or `..`"),
        ("s3://bucket/ns//etcd.db", "empty"),
        (
            "http://bucket/etcd.db",
            "must be `secret/<name>`, `file:<path>` or `s3://<bucket>/<object>`",
        ),
    ] {
        let refusal = Source::parse(bad).unwrap_err().to_string();
        assert!(refusal.contains(ETCD_RESTORE_FROM_ANNOTATION), "{refusal}");
        assert!(refusal.contains(rule), "{bad}: {refusal}");
    }
}

#[test]
fn objects_are_named_as_the_status_names_them() {
    let location = "s3://backups/etcd/ns/c1/etcd-20261207T030000Z.db.sealed";
    let source = Source::parse(location).unwrap();
    assert_eq!(
        source,
        Source::Object {
            bucket: "backups".into(),
            key: "etcd/ns/c1/etcd-20261207T030000Z.db.sealed".into()
        }
    );
    assert_eq!(source.to_string(), location);
}

#[test]
fn only_snapshot_objects_of_this_clusters_folder_in_the_backup_bucket_are_restored() {
    use kubeadm_api::controlplane::etcd_backup::EtcdBackup;
    let mut backup = EtcdBackup::default();
    backup.s3.bucket = "backups".into();
    backup.s3.prefix = Some("etcd".into());
    let check = |bucket: &str, key: &str, backup: Option<&EtcdBackup>| {
        check_object(bucket, key, backup, "ns", "c1").map_err(|r| r.to_string())
    };
    assert_eq!(
        check(
            "backups",
            "etcd/ns/c1/etcd-20261207T030000Z.db",
            Some(&backup)
        ),
        Ok("etcd/ns/c1/etcd-20261207T030000Z.json".into())
    );
    assert_eq!(
        check(
            "backups",
            "etcd/ns/c1/etcd-20261207T030000Z.db.sealed",
            Some(&backup)
        ),
        Ok("etcd/ns/c1/etcd-20261207T030000Z.json".into())
    );
    for (bucket, key, backup, rule) in [
        (
            "backups",
            "etcd/ns/c1/etcd-20261207T030000Z.db",
            None,
            "needs spec.etcdBackup",
        ),
        (
            "other",
            "etcd/ns/c1/etcd-20261207T030000Z.db",
            Some(&backup),
            "not spec.etcdBackup.s3.bucket (backups)",
        ),
        (
            "backups",
            "etcd/ns/c2/etcd-20261207T030000Z.db",
            Some(&backup),
            "snapshots of ns/c1 are in s3://backups/etcd/ns/c1/",
        ),
        (
            "backups",
            "etcd/ns/c1/etcd-20261207T030000Z.json",
            Some(&backup),
            "not a snapshot object",
        ),
    ] {
        let refusal = check(bucket, key, backup).unwrap_err();
        assert!(refusal.contains(ETCD_RESTORE_FROM_ANNOTATION), "{refusal}");
        assert!(refusal.contains(rule), "{key}: {refusal}");
    }
}

#[test]
fn only_this_clusters_snapshots_are_restored() {
    use kubeadm_api::meta::ETCD_SNAPSHOT_SECRET_TYPE;
    let secret = Source::Secret("s".into());
    assert_eq!(
        check_secret(&secret, "c1", Some(ETCD_SNAPSHOT_SECRET_TYPE), Some("c1")),
        Ok(())
    );
    let other = check_secret(&secret, "c1", Some(ETCD_SNAPSHOT_SECRET_TYPE), Some("c2"));
    assert!(
        other.unwrap_err().to_string().contains("names cluster c2"),
        "a snapshot of another cluster"
    );
    let opaque = check_secret(&secret, "c1", Some("Opaque"), Some("c1")).unwrap_err();
    assert!(
        opaque.to_string().contains("its type is \"Opaque\""),
        "{opaque}"
    );

    let dir = Path::new("/var/snapshots");
    let own = Path::new("/var/snapshots/ns/c1/etcd-20261203T030000Z.db");
    assert_eq!(check_file(own, Some(dir), "ns", "c1"), Ok(()));
    let foreign = check_file(own, Some(dir), "ns", "c2").unwrap_err();
    assert!(
        foreign
            .to_string()
            .contains("snapshots of ns/c2 are in /var/snapshots/ns/c2"),
        "{foreign}"
    );
    let deeper = Path::new("/var/snapshots/ns/c1/old/etcd.db");
    assert!(check_file(deeper, Some(dir), "ns", "c1").is_err());
    let no_dir = check_file(own, None, "ns", "c1").unwrap_err();
    assert!(
        no_dir.to_string().contains("--etcd-snapshot-dir"),
        "{no_dir}"
    );
}

/// A database that starts like bbolt's, followed by its SHA-256 as etcd streams it.
fn snapshot(database_len: usize) -> Vec<u8> {
    let mut database = vec![0u8; database_len];
    database[MAGIC_OFFSET..MAGIC_OFFSET + 4].copy_from_slice(&BBOLT_MAGIC.to_le_bytes());
    for (i, b) in database.iter_mut().enumerate().skip(64) {
        *b = (i % 251) as u8;
    }
    let hash = ring::digest::digest(&ring::digest::SHA256, &database);
    database.extend_from_slice(hash.as_ref());
    database
}

#[test]
fn the_integrity_check_is_etcds() {
    let source = Source::Secret("s".into());
    let good = snapshot(4096);
    let verified = verify(&source, &good).unwrap();
    assert_eq!(verified.database_bytes, 4096);
    assert_eq!(verified.sha256.len(), 64);

    let truncated = &good[..good.len() - 1];
    let refusal = verify(&source, truncated).unwrap_err().to_string();
    assert!(refusal.contains("fails the integrity check"), "{refusal}");
    assert!(refusal.contains("does not match"), "{refusal}");

    let mut altered = good.clone();
    altered[1000] ^= 1;
    assert!(verify(&source, &altered).is_err());

    let mut not_bbolt = good.clone();
    not_bbolt[MAGIC_OFFSET] ^= 0xff;
    let refusal = verify(&source, &not_bbolt).unwrap_err().to_string();
    assert!(refusal.contains("bbolt"), "{refusal}");

    assert!(
        verify(&source, &[0u8; 40])
            .unwrap_err()
            .to_string()
            .contains("too few")
    );
}

#[test]
fn the_check_of_a_snapshot_in_pieces_is_the_check_of_the_whole() {
    let source = Source::Secret("s".into());
    let good = snapshot(10_000);
    let mut altered = good.clone();
    altered[5000] ^= 1;
    for whole in [
        good.clone(),
        altered,
        good[..good.len() - 1].to_vec(),
        vec![0u8; 40],
    ] {
        let expected = verify(&source, &whole);
        for piece in [1, 7, 31, 32, 33, 4096, whole.len()] {
            let mut check = SnapshotCheck::default();
            for chunk in whole.chunks(piece) {
                check.update(chunk);
            }
            assert_eq!(check.finish(&source), expected, "pieces of {piece}");
        }
    }
    assert!(verify(&source, &good).is_ok());
}

#[test]
fn a_download_says_what_the_node_checks_and_is_signed_again_in_place() {
    use crate::etcd_backup::sealed::ObjectKeys;
    let plain = Download {
        url: "http://127.0.0.1:9000/b/ns/c1/etcd-1.db?X-Amz-Signature=aa".into(),
        stored_sha256: "11".repeat(32),
        sha256: "11".repeat(32),
        sealed: None,
    };
    let text = plain.render();
    assert_eq!(
        text,
        format!(
            "url http://127.0.0.1:9000/b/ns/c1/etcd-1.db?X-Amz-Signature=aa\nstored-sha256 {0}\nsha256 {0}\n",
            "11".repeat(32)
        )
    );
    let sealed = Download {
        sealed: Some(ObjectKeys {
            cipher: [3; 32],
            counter: [4; 16],
            mac: [5; 32],
        }),
        ..plain
    }
    .render();
    assert!(
        sealed.contains(&format!("\ncipher-key {}\n", "03".repeat(32))),
        "{sealed}"
    );
    assert!(sealed.contains(&format!("\ncounter {}\n", "04".repeat(16))));
    assert!(sealed.contains(&format!("\nmac-key {}\n", "05".repeat(32))));
    assert!(sealed.contains("\nsealed-header 40\n"));
    // The Debug form shows no URL (it grants reading) and no key.
    let debug = format!(
        "{:?}",
        Download::clone(&Download {
            url: "http://secret-url".into(),
            stored_sha256: String::new(),
            sha256: String::new(),
            sealed: None,
        })
    );
    assert!(!debug.contains("secret-url"), "{debug}");

    let again = Download::with_url(&sealed, "http://127.0.0.1:9000/b/new?X-Amz-Signature=bb");
    assert_eq!(
        again.lines().next(),
        Some("url http://127.0.0.1:9000/b/new?X-Amz-Signature=bb")
    );
    assert_eq!(
        again.lines().skip(1).collect::<Vec<_>>(),
        sealed.lines().skip(1).collect::<Vec<_>>()
    );
}

#[test]
fn nothing_is_deleted_before_the_snapshot_is_staged() {
    let machines = [machine("m1"), machine("m2"), machine("m3")];
    assert_eq!(
        step(None, &machines),
        Step::Stage(Source::parse(REQUESTED).unwrap())
    );
    // A copy of an earlier request is staged again for this one.
    assert!(matches!(
        step(Some("secret/older"), &machines),
        Step::Stage(_)
    ));
    assert_eq!(
        step(Some(REQUESTED), &machines),
        Step::Delete(vec!["m1".into(), "m2".into(), "m3".into()])
    );
}

#[test]
fn the_old_machines_go_hooks_released_before_the_restoring_one_comes() {
    let staged = Some(REQUESTED);
    let some_deleting = [deleting(machine("m1"), true), machine("m2")];
    assert_eq!(
        step(staged, &some_deleting),
        Step::Delete(vec!["m2".into()])
    );

    let hooked = [
        deleting(machine("m1"), true),
        deleting(machine("m2"), false),
    ];
    assert_eq!(step(staged, &hooked), Step::ReleaseHooks(vec!["m1".into()]));

    let leaving = [
        deleting(machine("m1"), false),
        deleting(machine("m2"), false),
    ];
    assert_eq!(
        step(staged, &leaving),
        Step::WaitForDeletion(vec!["m1".into(), "m2".into()])
    );

    // All control-plane machines lost: the restore starts from nothing.
    assert_eq!(step(staged, &[]), Step::Create);
}

#[test]
fn the_restoring_machine_finishes_the_restore_once_its_member_answers() {
    let staged = Some(REQUESTED);
    assert_eq!(
        step(staged, &[restoring("r1", false)]),
        Step::WaitForMachine("r1".into())
    );
    assert_eq!(
        step(staged, &[restoring("r1", true)]),
        Step::Finish {
            machine: "r1".into()
        }
    );
    // A restart after the staged copy was dropped, before the request was: finished again, not redone.
    assert_eq!(
        step(None, &[restoring("r1", true)]),
        Step::Finish {
            machine: "r1".into()
        }
    );
    // A restoring machine that failed and is deleted is an old one: gone first, then another is made.
    let failed = [deleting(restoring("r1", false), false)];
    assert_eq!(
        step(staged, &failed),
        Step::WaitForDeletion(vec!["r1".into()])
    );
}

#[test]
fn unsafe_restores_are_refused() {
    let external = next_step(Observed {
        requested: REQUESTED,
        external_etcd: true,
        staged: None,
        machines: &[machine("m1")],
    });
    assert_eq!(external, Step::Refuse(Refusal::ExternalEtcd));

    let running = step(Some("secret/first"), &[restoring("r1", false)]);
    let Step::Refuse(refusal) = running else {
        panic!("{running:?}")
    };
    assert_eq!(
        refusal.to_string(),
        format!(
            "annotation {ETCD_RESTORE_FROM_ANNOTATION}: a restore from secret/first is under way \
             (Machine r1); set the annotation back to it, or wait until it is done"
        )
    );

    let bad = next_step(Observed {
        requested: "ftp://x",
        external_etcd: false,
        staged: None,
        machines: &[],
    });
    assert!(matches!(bad, Step::Refuse(Refusal::BadSource { .. })));
}

#[test]
fn a_finished_restore_is_read_back_from_its_record() {
    let record = record("2026-12-03T04:23:36Z", REQUESTED, "r1");
    let (step, source) = recorded(&record).unwrap();
    assert_eq!(source, REQUESTED);
    assert_eq!(
        step.describe(source),
        format!("restored {REQUESTED} on Machine r1")
    );
    assert_eq!(recorded("hand-written"), None);
}
