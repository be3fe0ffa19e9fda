//! A `PersistentWal` given a file where its directory should be refuses with
//! `WalError::NotADirectory`, naming the file and saying what to do, instead of a bare I/O
//! error ("File exists", "Not a directory"); the file is left as it was.

use event_base::{CoreError, PersistentWal, WalError};

#[test]
fn a_file_as_the_wal_path_is_not_a_directory() {
    let tmp = tempfile::tempdir().unwrap();
    let file = tmp.path().join("wal");
    std::fs::write(&file, b"not a WAL").unwrap();

    let err = PersistentWal::open(&file).unwrap_err();
    match &err {
        WalError::NotADirectory {
            path,
            file: culprit,
        } => {
            assert_eq!(path, &file);
            assert_eq!(culprit, &file);
        }
        other => panic!("expected NotADirectory, got {other:?}"),
    }
    let text = err.to_string();
    assert!(text.contains("is not a directory"), "{text}");
    assert!(text.contains(&file.display().to_string()), "{text}");
    assert!(
        text.contains("give the WAL the path of a directory"),
        "{text}"
    );
    assert_eq!(std::fs::read(&file).unwrap(), b"not a WAL");

    // The same message once it is a CoreError (what `?` in an application makes of it).
    let core = CoreError::from(err);
    assert!(core.to_string().contains("is not a directory"), "{core}");
}

#[test]
fn a_file_among_the_parents_is_named() {
    let tmp = tempfile::tempdir().unwrap();
    let file = tmp.path().join("data");
    std::fs::write(&file, b"").unwrap();
    let dir = file.join("wal").join("orders");

    match PersistentWal::builder(&dir).open().unwrap_err() {
        WalError::NotADirectory {
            path,
            file: culprit,
        } => {
            assert_eq!(path, dir);
            assert_eq!(culprit, file, "the file in the way, not the WAL path");
        }
        other => panic!("expected NotADirectory, got {other:?}"),
    }
    assert!(std::fs::metadata(&file).unwrap().is_file());
}

#[test]
fn a_missing_directory_is_still_created() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("a").join("wal");
    let wal = PersistentWal::open(&dir).unwrap();
    assert_eq!(wal.dir(), dir);
    assert!(dir.is_dir());
}
