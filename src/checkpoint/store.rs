//! The RocksDB file behind the checkpoint.

use std::path::{Path, PathBuf};

use rocksdb::{Options, WriteBatch, WriteOptions, DB};

use super::Checkpoint;
use crate::source::binlog::GtidState;

const KEY_CHECKPOINT: &[u8] = b"checkpoint";
const KEY_FORMAT: &[u8] = b"format";
const FORMAT_VERSION: &[u8] = b"2";
/// Format 1 kept only the last MySQL GTID, not the executed set a resume needs.
const FORMAT_LAST_GTID_ONLY: &[u8] = b"1";

/// Why the checkpoint could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum CheckpointError {
    #[error("cannot open the checkpoint RocksDB at {path} (checkpoint.path): {detail}; if it is corrupt, move the directory aside: the relay then starts from the current binlog position and the sweep delivers every PENDING row")]
    Open { path: PathBuf, detail: String },
    #[error("checkpoint at {path} is unreadable ({detail}); move the directory aside to start fresh (the sweep delivers every PENDING row)")]
    Corrupt { path: PathBuf, detail: String },
    #[error("cannot write the checkpoint at {path}: {detail}; check the disk (space, permissions)")]
    Write { path: PathBuf, detail: String },
}

/// The file by which RocksDB keeps a second process from opening a store for writing;
/// its name is in the error such a process gets.
const LOCK_FILE: &str = "LOCK";

fn options(create: bool) -> Options {
    let mut options = Options::default();
    options.create_if_missing(create);
    options.set_paranoid_checks(true);
    options.set_keep_log_file_num(2);
    options
}

fn open_error(path: &Path, error: rocksdb::Error) -> CheckpointError {
    CheckpointError::Open { path: path.to_owned(), detail: error.into_string() }
}

/// The open checkpoint database.
pub struct CheckpointStore {
    db: DB,
    path: PathBuf,
}

impl CheckpointStore {
    /// Opens (creating if absent) the checkpoint at `path`.
    pub fn open(path: &Path) -> Result<Self, CheckpointError> {
        let db = DB::open(&options(true), path).map_err(|e| open_error(path, e))?;
        Ok(Self { db, path: path.to_owned() })
    }

    /// Opens an existing checkpoint for writing, never creating one; `Ok(None)` while
    /// another process (a running relay) has it open, as RocksDB allows only one.
    pub fn open_unless_in_use(path: &Path) -> Result<Option<Self>, CheckpointError> {
        match DB::open(&options(false), path) {
            Ok(db) => Ok(Some(Self { db, path: path.to_owned() })),
            Err(e) if e.as_ref().contains(LOCK_FILE) => Ok(None),
            Err(e) => Err(open_error(path, e)),
        }
    }

    /// Opens an existing checkpoint to read only; this works while a relay has it open.
    pub fn open_read_only(path: &Path) -> Result<Self, CheckpointError> {
        let db = DB::open_for_read_only(&options(false), path, false).map_err(|e| open_error(path, e))?;
        Ok(Self { db, path: path.to_owned() })
    }

    /// The directory of the store.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The saved checkpoint, or `None` on a fresh store.
    pub fn load(&self) -> Result<Option<Checkpoint>, CheckpointError> {
        let corrupt = |detail: String| CheckpointError::Corrupt { path: self.path.clone(), detail };
        let format = self.db.get(KEY_FORMAT).map_err(|e| corrupt(e.to_string()))?;
        if let Some(format) = format.as_deref().filter(|f| ![FORMAT_VERSION, FORMAT_LAST_GTID_ONLY].contains(f)) {
            return Err(corrupt(format!("unknown format version {:?}", String::from_utf8_lossy(format))));
        }
        let Some(bytes) = self.db.get(KEY_CHECKPOINT).map_err(|e| corrupt(e.to_string()))? else { return Ok(None) };
        let mut checkpoint: Checkpoint = serde_json::from_slice(&bytes).map_err(|e| corrupt(e.to_string()))?;
        if format.as_deref() == Some(FORMAT_LAST_GTID_ONLY) {
            // Its MySQL GTID is one transaction, not a set to resume from: file and position only.
            checkpoint.position.gtid.take_if(|g| !GtidState::parse(g).is_mariadb());
        }
        Ok(Some(checkpoint))
    }

    /// Saves `checkpoint` in one synced write batch (position and metadata together).
    pub fn save(&self, checkpoint: &Checkpoint) -> Result<(), CheckpointError> {
        let write = |detail: String| CheckpointError::Write { path: self.path.clone(), detail };
        let bytes = serde_json::to_vec(checkpoint).map_err(|e| write(e.to_string()))?;
        let mut batch = WriteBatch::default();
        batch.put(KEY_FORMAT, FORMAT_VERSION);
        batch.put(KEY_CHECKPOINT, bytes);
        let mut options = WriteOptions::default();
        options.set_sync(true);
        self.db.write_opt(batch, &options).map_err(|e| write(e.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::source::{BinlogPosition, OwedSweep};

    fn temp_dir() -> PathBuf {
        std::env::temp_dir().join(format!("outbox-relay-ckpt-{}", uuid::Uuid::now_v7().simple()))
    }

    fn sample() -> Checkpoint {
        Checkpoint {
            position: BinlogPosition {
                file: "mariadb-bin.000003".into(),
                pos: 4242,
                gtid: Some("0-1-17".into()),
                commit_time: Some(1_764_500_000),
            },
            server_identity: "1@db".into(),
            queue_counts: BTreeMap::from([("t-order-event".to_owned(), 8)]),
            queue_layouts: BTreeMap::from([(
                "t-order-event".to_owned(),
                serde_json::from_str(r#"{"broker-a":[0,1,2,3],"broker-b":[0,1,2,3]}"#).expect("layout"),
            )]),
            acked_through: Some(77),
            owed_sweep: Some(OwedSweep {
                reason: "first start".into(),
                position_read_local_us: Some(1_764_500_000_000_000),
            }),
            queue_marks: BTreeMap::from([("t-order-event".to_owned(), BTreeMap::from([(3, 81)]))]),
        }
    }

    #[test]
    fn save_then_reopen_loads_the_same_checkpoint() {
        let dir = temp_dir();
        {
            let store = CheckpointStore::open(&dir).expect("open");
            assert_eq!(store.load().expect("load"), None);
            store.save(&sample()).expect("save");
        }
        let store = CheckpointStore::open(&dir).expect("reopen");
        assert_eq!(store.load().expect("load"), Some(sample()));
        drop(store);
        std::fs::remove_dir_all(&dir).ok();
    }

    #[test]
    fn a_checkpoint_written_before_layouts_were_pinned_loads_without_them() {
        let mut json = serde_json::to_value(sample()).expect("json");
        json.as_object_mut().expect("an object").remove("queue_layouts");
        let old: Checkpoint = serde_json::from_value(json).expect("the older format");
        assert!(old.queue_layouts.is_empty());
        assert_eq!(old.queue_counts, sample().queue_counts);
    }

    #[test]
    fn a_format_1_mysql_gtid_is_not_taken_for_a_set() {
        let dir = temp_dir();
        let store = CheckpointStore::open(&dir).expect("open");
        let mut old = sample();
        old.position.gtid = Some("3e11fa47-71ca-11e1-9e33-c80aa9429562:23".into());
        store.db.put(KEY_FORMAT, FORMAT_LAST_GTID_ONLY).expect("put");
        store.db.put(KEY_CHECKPOINT, serde_json::to_vec(&old).expect("json")).expect("put");
        assert_eq!(store.load().expect("load").expect("a checkpoint").position.gtid, None);
        store.db.put(KEY_CHECKPOINT, serde_json::to_vec(&sample()).expect("json")).expect("put");
        assert_eq!(store.load().expect("load"), Some(sample()), "a MariaDB GTID list is kept");
        drop(store);
        std::fs::remove_dir_all(&dir).ok();
    }

    #[test]
    fn a_store_in_use_is_not_opened_for_writing_but_can_be_read() {
        let dir = temp_dir();
        let running = CheckpointStore::open(&dir).expect("open");
        running.save(&sample()).expect("save");
        assert!(CheckpointStore::open_unless_in_use(&dir).expect("no error").is_none(), "held by another handle");
        let reader = CheckpointStore::open_read_only(&dir).expect("read-only");
        assert_eq!(reader.load().expect("load"), Some(sample()));
        drop((running, reader));
        assert!(CheckpointStore::open_unless_in_use(&dir).expect("open").is_some(), "free again");
        std::fs::remove_dir_all(&dir).ok();
    }

    #[test]
    fn garbage_in_the_store_is_a_clear_corrupt_error() {
        let dir = temp_dir();
        {
            let store = CheckpointStore::open(&dir).expect("open");
            store.db.put(KEY_CHECKPOINT, b"{not json").expect("put");
        }
        let store = CheckpointStore::open(&dir).expect("reopen");
        let error = store.load().expect_err("corrupt").to_string();
        assert!(error.contains("unreadable") && error.contains("move the directory aside"), "{error}");
        drop(store);
        std::fs::remove_dir_all(&dir).ok();
    }

    #[test]
    fn a_file_where_the_directory_should_be_is_an_open_error() {
        let path = temp_dir();
        std::fs::write(&path, b"not a rocksdb").expect("write");
        let error = CheckpointStore::open(&path).err().expect("open fails").to_string();
        assert!(error.contains("checkpoint.path"), "{error}");
        std::fs::remove_file(&path).ok();
    }
}
