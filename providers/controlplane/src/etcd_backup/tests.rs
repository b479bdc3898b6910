use super::*;

fn at(text: &str) -> Timestamp {
    text.parse().unwrap()
}

fn backup(prefix: Option<&str>) -> EtcdBackup {
    let mut backup = EtcdBackup::default();
    backup.s3.bucket = "backups".into();
    backup.s3.prefix = prefix.map(str::to_owned);
    backup
}

#[test]
fn the_schedule_is_five_cron_fields_in_utc() {
    let every_12_hours = Schedule::of(&backup(None)).unwrap();
    assert_eq!(
        every_12_hours
            .next_after(at("2026-12-07T11:59:59Z"))
            .unwrap(),
        at("2026-12-07T12:00:00Z")
    );
    assert_eq!(
        every_12_hours
            .next_after(at("2026-12-07T12:00:00Z"))
            .unwrap(),
        at("2026-12-08T00:00:00Z"),
        "strictly after"
    );
    let weekdays = Schedule::parse("30 2 * * 1-5").unwrap();
    // 2026-12-05 is a Saturday: the next weekday 02:30 is Monday's.
    assert_eq!(
        weekdays.next_after(at("2026-12-05T03:00:00Z")).unwrap(),
        at("2026-12-07T02:30:00Z")
    );
    for (text, says) in [
        ("0 */12 * *", "has 4 fields"),
        ("0 0 */12 * * *", "has 6 fields"),
        ("61 * * * *", "is not a cron schedule"),
        ("0 0 * * funday", "is not a cron schedule"),
    ] {
        let error = Schedule::parse(text).unwrap_err();
        assert!(
            error.starts_with("spec.etcdBackup.schedule") && error.contains(says),
            "{text}: {error}"
        );
    }
}

#[test]
fn a_snapshot_is_due_once_a_scheduled_time_passed_since_the_last() {
    let hourly = Schedule::parse("0 * * * *").unwrap();
    assert!(
        !hourly.due(None, at("2026-12-07T10:00:00Z")),
        "the clock starts first"
    );
    let last = Some(at("2026-12-07T10:00:00Z"));
    assert!(!hourly.due(last, at("2026-12-07T10:59:59Z")));
    assert!(hourly.due(last, at("2026-12-07T11:00:00Z")));
    assert!(
        hourly.due(last, at("2026-12-08T09:13:00Z")),
        "a missed time is made up once"
    );
}

#[test]
fn snapshots_live_in_a_folder_per_cluster() {
    assert_eq!(folder(&backup(None), "default", "prod"), "default/prod");
    assert_eq!(
        folder(&backup(Some("/etcd//eu-1/")), "team-a", "prod"),
        "etcd/eu-1/team-a/prod"
    );
    assert_eq!(
        names("etcd/default/prod", at("2026-12-07T16:30:05Z"), false),
        (
            "etcd/default/prod/etcd-20261207T163005Z.db".to_owned(),
            "etcd/default/prod/etcd-20261207T163005Z.json".to_owned()
        )
    );
    assert_eq!(
        names("p", at("2026-12-07T16:30:05Z"), true).0,
        "p/etcd-20261207T163005Z.db.sealed"
    );
    let mut zero = backup(None);
    zero.retention = Some(0);
    assert_eq!(retention(&zero), 1, "at least the newest");
    assert_eq!(retention(&backup(None)), 5);
}

#[test]
fn retention_keeps_the_newest_complete_snapshots_and_nothing_named_otherwise() {
    let files: Vec<String> = [
        "etcd-20261201T000000Z.db",
        "etcd-20261201T000000Z.json",
        "etcd-20261202T000000Z.db.sealed",
        "etcd-20261202T000000Z.json",
        // An upload that never got its manifest.
        "etcd-20261203T000000Z.db",
        "etcd-20261204T000000Z.db",
        "etcd-20261204T000000Z.json",
        "etcd-20261205T000000Z.db",
        "etcd-20261205T000000Z.json",
        // Not ours.
        "notes.txt",
        "etcd-latest.db",
        "etcd-20261205T000000Z.db.partial",
    ]
    .map(str::to_owned)
    .to_vec();
    let mut pruned = to_prune(&files, 2, None);
    pruned.sort();
    assert_eq!(
        pruned,
        [
            "etcd-20261201T000000Z.db",
            "etcd-20261201T000000Z.json",
            "etcd-20261202T000000Z.db.sealed",
            "etcd-20261202T000000Z.json",
            "etcd-20261203T000000Z.db",
        ]
    );
    assert_eq!(
        to_prune(&files, 2, Some("20261203T000000Z")).len(),
        4,
        "the snapshot still being written stays"
    );
    assert!(to_prune(&files, 10, None) == ["etcd-20261203T000000Z.db"]);
    assert!(to_prune(&files[9..], 1, None).is_empty());
}

#[test]
fn a_manifest_reads_back_as_written() {
    let manifest = Manifest {
        format: MANIFEST_FORMAT.into(),
        cluster: "default/prod".into(),
        time: "2026-12-07T16:30:05Z".into(),
        member: "prod-control-plane-abcde".into(),
        revision: Some(1234),
        object: "default/prod/etcd-20261207T163005Z.db.sealed".into(),
        size: 1 << 20,
        sha256: "ab".repeat(32),
        stored_size: (1 << 20) + 72,
        stored_sha256: "cd".repeat(32),
        encryption: Some(ManifestEncryption {
            algorithm: sealed::ALGORITHM.into(),
            key_secret: "prod-etcd-backup-key/key".into(),
            key_fingerprint: "0123456789abcdef".into(),
        }),
    };
    let text = serde_json::to_string(&manifest).unwrap();
    assert!(text.contains("\"storedSha256\""), "{text}");
    assert_eq!(serde_json::from_str::<Manifest>(&text).unwrap(), manifest);
}
