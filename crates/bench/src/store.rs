//! The results store: one SQLite file (by default `<data dir>/pagelab/results.db`, or
//! `$PAGELAB_DB`, or `--db`) that keeps every run pagelab measured, imported or projected, so
//! that `compare`, `runs` and `export` can work on results made days or machines apart.
//!
//! # What it keeps
//!
//! * `runs`: one row per run with its whole [`RunMeta`] (profile as TOML, host facts as JSON,
//!   command line, version, experiment), its [`Origin`], [`Status`] and start/finish times
//!   (RFC 3339, UTC), and for a run written as it is measured the process writing it
//!   ([`crate::owner::Owner`]: pid, start time, boot id, host), so that a run left `running` by a
//!   killed process can be told from one still being measured.
//! * `samples`: `(run, mode, tasks, metric, higher_is_better, repeat, seq, value)`.
//! * `counters`: engine counters over a measured window, `(run, mode, tasks, repeat, name,
//!   value)`.
//!
//! Samples and counters belong to their run: foreign keys with `ON DELETE CASCADE` remove them
//! with it, and no sample can name a run that does not exist.
//!
//! # Why SQLite, why WAL
//!
//! A run is written while it is being measured, one transaction per sample, so that a run
//! stopped by Ctrl-C, a crash or `kill -9` keeps every sample but the one under way; several `pagelab run` processes (an experiment
//! on several targets, two terminals) may write the same store at once while `compare` reads it.
//! SQLite gives atomic transactions, crash safety and locking between processes in one file
//! without a server. The write-ahead log lets readers proceed while a writer commits, and
//! writers queue behind each other for up to [`BUSY_TIMEOUT`] instead of failing; write
//! transactions are `BEGIN IMMEDIATE`, so two writers never both hold a read lock and then
//! deadlock trying to upgrade it. Readers open the file read-only (it may be on a read-only
//! path); in WAL mode SQLite then leaves empty `-wal` and `-shm` files beside it, which the next
//! writer reuses and removes.
//!
//! # Migrations
//!
//! The schema is an ordered list of SQL migrations; `PRAGMA user_version` is the number of those
//! applied, and [`SCHEMA_VERSION`] is the number this pagelab knows. Opening for writing applies
//! the missing ones, each in its own transaction together with the version bump, so a store is
//! always at exactly one version. A migration once released is never edited: a change is a new
//! migration appended to the list. A store with a higher version than ours was written by a newer
//! pagelab and is refused, untouched. Reading never migrates; the queries here only use what every
//! version from [`MIN_READ_VERSION`] on has, so older stores can still be read read-only.
//! `PRAGMA application_id` marks a file as a pagelab store, so that `--db` pointing at some other
//! program's database is refused instead of being "upgraded".
//!
//! # Invariants
//!
//! * A failed command never alters stored results: every write is one transaction, values are
//!   checked before anything is written, and a file that is not a (readable) pagelab store is
//!   left byte for byte as it was.
//! * Stored runs are never rewritten: samples, counters and the final status are only accepted
//!   for a run that is still [`Status::Running`]; runs are only ever deleted, and only when
//!   asked for explicitly (an empty filter deletes nothing; see [`Store::delete_all_runs`]).
//! * Run ids are never reused, even after deletions, so an id seen once always means that run.
//! * Stored values are finite (SQLite would turn a NaN into NULL).

use std::collections::HashMap;
use std::ffi::OsString;
use std::fmt::Write as _;
use std::io;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use rusqlite::types::{Type, Value};
use rusqlite::{Connection, ErrorCode, OpenFlags, Row, Transaction, TransactionBehavior};

use crate::compare::SetSummary;
use crate::owner::Owner;
use crate::results::{
    CounterRow, Origin, RunData, RunFilter, RunMeta, SampleKey, SampleRow, Status, StoredRun,
    UnknownName,
};
use crate::stats::Summary;

/// The environment variable that overrides the default store path, so that scripts and tests can
/// point every pagelab command at another store without repeating `--db`.
pub const DB_ENV: &str = "PAGELAB_DB";

/// How long a writer waits for another one to finish before giving up. Writers commit small
/// transactions (one sample set, one run), so a wait this long means a stuck process.
pub const BUSY_TIMEOUT: Duration = Duration::from_secs(10);

/// `PRAGMA application_id` of a pagelab store (`"PgLb"`), so that `file(1)`-style tools and
/// [`Store::open`] can tell it from other SQLite databases.
const APPLICATION_ID: i32 = 0x5067_4c62;

/// The schema, one migration per entry; entry `i` takes a store from version `i` to `i + 1`.
/// Never edit a released entry, append a new one.
const MIGRATIONS: &[&str] = &[
    // 1: runs, samples, counters.
    "
    CREATE TABLE runs (
        -- AUTOINCREMENT: ids are never reused after a deletion.
        id              INTEGER PRIMARY KEY AUTOINCREMENT,
        label           TEXT NOT NULL CHECK (label <> ''),
        workload        TEXT NOT NULL,
        target          TEXT NOT NULL,
        origin          TEXT NOT NULL CHECK (origin IN ('measured', 'projected', 'imported')),
        profile         TEXT,
        profile_toml    TEXT,
        host_json       TEXT,
        machine         TEXT,
        experiment      TEXT,
        pagelab_version TEXT NOT NULL,
        command         TEXT NOT NULL,
        status          TEXT NOT NULL CHECK (status IN ('running', 'complete', 'incomplete')),
        started         TEXT NOT NULL,
        finished        TEXT
    ) STRICT;
    CREATE INDEX runs_label ON runs (label);

    -- The primary key starts with run_id: it is the index on run_id (for the cascade and for
    -- per-run reads), it orders samples the way samples() returns them, and it makes a
    -- (key, repeat, seq) unique within a run.
    CREATE TABLE samples (
        run_id           INTEGER NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
        mode             TEXT NOT NULL,
        tasks            INTEGER NOT NULL CHECK (tasks BETWEEN 0 AND 4294967295),
        metric           TEXT NOT NULL,
        higher_is_better INTEGER NOT NULL CHECK (higher_is_better IN (0, 1)),
        repeat           INTEGER NOT NULL CHECK (repeat BETWEEN 0 AND 4294967295),
        seq              INTEGER NOT NULL CHECK (seq BETWEEN 0 AND 4294967295),
        value            REAL NOT NULL,
        PRIMARY KEY (run_id, mode, tasks, metric, repeat, seq)
    ) STRICT, WITHOUT ROWID;

    CREATE TABLE counters (
        run_id INTEGER NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
        mode   TEXT NOT NULL,
        tasks  INTEGER NOT NULL CHECK (tasks BETWEEN 0 AND 4294967295),
        repeat INTEGER NOT NULL CHECK (repeat BETWEEN 0 AND 4294967295),
        name   TEXT NOT NULL,
        value  REAL NOT NULL,
        PRIMARY KEY (run_id, mode, tasks, repeat, name)
    ) STRICT, WITHOUT ROWID;
    ",
    // 2: the process writing a running run (see crate::owner), so that `runs` can tell a run
    // being measured from one whose process was killed. NULL for runs stored whole and for runs
    // begun before this version.
    "
    ALTER TABLE runs ADD COLUMN owner_pid   INTEGER CHECK (owner_pid BETWEEN 0 AND 4294967295);
    ALTER TABLE runs ADD COLUMN owner_start INTEGER CHECK (owner_start >= 0);
    ALTER TABLE runs ADD COLUMN owner_boot  TEXT;
    ALTER TABLE runs ADD COLUMN owner_host  TEXT;
    ",
];

/// The schema version this pagelab writes: the `PRAGMA user_version` after the newest migration.
pub const SCHEMA_VERSION: i64 = MIGRATIONS.len() as i64;

/// The oldest schema the read queries in this module work on. Raise it only if a migration makes
/// old stores unreadable by the current queries (they then need one `open` to be upgraded).
/// (Version 1 has no owner columns; [`Store::runs`] reads them as NULL there.)
pub const MIN_READ_VERSION: i64 = 1;

/// The first schema with the owner columns.
const OWNER_VERSION: i64 = 2;

/// Why the store could not do what was asked. Each message is one line that names the store's
/// path and says what to do about it, because it ends up printed by the CLI as is.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// Neither `$PAGELAB_DB` nor a per-user data directory is available.
    #[error(
        "cannot find a data directory for the results store (is $HOME set?); set {DB_ENV} or give --db"
    )]
    NoDataDir,
    /// [`Store::open_read`] on a path with no store.
    #[error(
        "no results store at {}; run `pagelab run` or `pagelab import` first, or give --db",
        path.display()
    )]
    Missing { path: PathBuf },
    /// The store's directory could not be created.
    #[error(
        "cannot create the directory of the results store {} ({source}); fix the path or give another --db",
        path.display()
    )]
    CreateDir { path: PathBuf, source: io::Error },
    /// SQLite could not open (or create) the file.
    #[error(
        "cannot open the results store {} ({detail}); check the path and the permissions of the file and its directory, or give another --db",
        path.display()
    )]
    CannotOpen { path: PathBuf, detail: String },
    /// The file is an SQLite database of some other program.
    #[error(
        "{} is not a pagelab results store ({detail}); it was left untouched; give another --db",
        path.display()
    )]
    NotPagelab { path: PathBuf, detail: String },
    /// The file is not an SQLite database at all, or a damaged one.
    #[error(
        "{} is not a pagelab results store or is corrupt ({detail}); it was left untouched; give another --db or restore it from a copy",
        path.display()
    )]
    Corrupt { path: PathBuf, detail: String },
    /// The store's schema is newer than this pagelab's.
    #[error(
        "{} was written by a newer pagelab (schema {found}; this pagelab knows up to {known}); upgrade pagelab or use another --db",
        path.display()
    )]
    Newer {
        path: PathBuf,
        found: i64,
        known: i64,
    },
    /// [`Store::open_read`] on a store too old for the read queries.
    #[error(
        "{} has schema {found}, older than this pagelab can read ({min}); open it once with a writing command (`pagelab run`, `pagelab import`) to upgrade it, or use another --db",
        path.display(),
        min = MIN_READ_VERSION
    )]
    TooOld { path: PathBuf, found: i64 },
    /// A write on a store opened with [`Store::open_read`], or on a file we may not write.
    #[error(
        "the results store {} is read-only (opened for reading, or no write permission on the file or its directory); fix its permissions or give another --db",
        path.display()
    )]
    ReadOnly { path: PathBuf },
    /// Another process held the write lock for longer than [`BUSY_TIMEOUT`].
    #[error(
        "the results store {} stayed locked by another process for over {}s ({source}); try again once it has finished",
        path.display(),
        BUSY_TIMEOUT.as_secs()
    )]
    Busy {
        path: PathBuf,
        source: rusqlite::Error,
    },
    /// The write was refused before anything was stored (a NaN, a finished run, a conflict).
    #[error("nothing was written to the results store {}: {reason}", path.display())]
    Rejected { path: PathBuf, reason: String },
    /// A run id that is not in the store.
    #[error(
        "run {run} is not in the results store {}; list the runs with `pagelab runs`",
        path.display()
    )]
    NoSuchRun { path: PathBuf, run: i64 },
    /// [`Store::delete_runs`] with a filter that selects every run.
    #[error(
        "refusing to delete every run in {} with an empty selection; name runs, labels or other criteria, or delete all runs explicitly",
        path.display()
    )]
    EmptyFilter { path: PathBuf },
    /// Any other SQLite failure (disk full, I/O error, ...).
    #[error("the results store {} failed: {source}", path.display())]
    Sqlite {
        path: PathBuf,
        source: rusqlite::Error,
    },
}

/// Turns an SQLite error into the [`StoreError`] that says what to do about it.
fn classify(path: &Path, e: rusqlite::Error) -> StoreError {
    let path = path.to_path_buf();
    match e.sqlite_error_code() {
        Some(ErrorCode::NotADatabase | ErrorCode::DatabaseCorrupt) => StoreError::Corrupt {
            path,
            detail: e.to_string(),
        },
        Some(ErrorCode::ReadOnly) => StoreError::ReadOnly { path },
        Some(ErrorCode::DatabaseBusy | ErrorCode::DatabaseLocked) => {
            StoreError::Busy { path, source: e }
        }
        Some(ErrorCode::CannotOpen | ErrorCode::PermissionDenied) => StoreError::CannotOpen {
            path,
            detail: e.to_string(),
        },
        _ => StoreError::Sqlite { path, source: e },
    }
}

/// What a file turned out to be when opened.
enum Found {
    /// An empty database (a new or zero-length file): ours to initialise.
    Fresh,
    /// A pagelab store at this schema version.
    Pagelab(i64),
    /// Some other program's database.
    Foreign(String),
    /// Marked as ours but with an impossible schema version.
    Damaged(String),
}

/// Refuses from the file's 100-byte header alone what can be refused from it, before SQLite opens
/// the file: opening a WAL database, even read-only, leaves `-wal` and `-shm` files next to it.
/// The header is conclusive for these because a pagelab store's application id and schema
/// version only ever go from 0 to ours and up; anything else is left to [`inspect`]. The header
/// is read without SQLite's locks, so a refusal needs two reads that agree (a checkpoint may be
/// rewriting it); when they differ, SQLite decides.
fn precheck(path: &Path) -> Result<(), StoreError> {
    fn read_header(path: &Path) -> Option<Vec<u8>> {
        use std::io::Read;
        let mut header = Vec::with_capacity(100);
        let file = std::fs::File::open(path).ok()?;
        file.take(100).read_to_end(&mut header).ok()?;
        Some(header)
    }
    let Some(header) = read_header(path) else {
        return Ok(()); // SQLite will say why.
    };
    if header.is_empty() || read_header(path).as_ref() != Some(&header) {
        return Ok(());
    }
    if header.len() < 100 || !header.starts_with(b"SQLite format 3\0") {
        return Err(StoreError::Corrupt {
            path: path.to_path_buf(),
            detail: "no SQLite database header".into(),
        });
    }
    let be32 = |at: usize| i32::from_be_bytes(header[at..at + 4].try_into().expect("4 bytes"));
    let (version, app_id) = (i64::from(be32(60)), be32(68));
    if app_id == APPLICATION_ID && version > SCHEMA_VERSION {
        return Err(StoreError::Newer {
            path: path.to_path_buf(),
            found: version,
            known: SCHEMA_VERSION,
        });
    }
    if app_id == APPLICATION_ID && version < 1 {
        return Err(StoreError::Corrupt {
            path: path.to_path_buf(),
            detail: format!("pagelab's application_id with schema version {version}"),
        });
    }
    if app_id != APPLICATION_ID && app_id != 0 {
        return Err(StoreError::NotPagelab {
            path: path.to_path_buf(),
            detail: format!("application_id {app_id:#x}, another program's"),
        });
    }
    Ok(())
}

/// Retries `f` while SQLite reports the database busy without having waited itself, up to
/// [`BUSY_TIMEOUT`]. SQLite skips the busy handler where waiting could deadlock, which here means
/// a connection switching a new store to WAL while another one reads it; such a conflict passes
/// as soon as the other statement ends.
fn retry_busy<T>(mut f: impl FnMut() -> rusqlite::Result<T>) -> rusqlite::Result<T> {
    let deadline = Instant::now() + BUSY_TIMEOUT;
    let mut pause = Duration::from_millis(1);
    loop {
        match f() {
            Err(e)
                if e.sqlite_error_code() == Some(ErrorCode::DatabaseBusy)
                    && Instant::now() < deadline =>
            {
                std::thread::sleep(pause);
                pause = (pause * 2).min(Duration::from_millis(50));
            }
            r => return r,
        }
    }
}

/// Looks at a database without writing to it, in one read transaction so that the pragmas and
/// the schema come from the same commit (another process may be creating the store right now).
fn inspect(conn: &Connection) -> rusqlite::Result<Found> {
    retry_busy(|| {
        let tx = Transaction::new_unchecked(conn, TransactionBehavior::Deferred)?;
        let found = inspect_in(&tx)?;
        tx.rollback()?;
        Ok(found)
    })
}

fn inspect_in(conn: &Connection) -> rusqlite::Result<Found> {
    // The first read of the file: garbage or a truncated database fails here.
    let app_id: i32 = conn.pragma_query_value(None, "application_id", |r| r.get(0))?;
    let version: i64 = conn.pragma_query_value(None, "user_version", |r| r.get(0))?;
    let mut tables = Vec::new();
    let mut stmt = conn.prepare(
        "SELECT name FROM sqlite_schema WHERE name NOT LIKE 'sqlite_%' ORDER BY type DESC, name",
    )?;
    let mut rows = stmt.query([])?;
    while let Some(row) = rows.next()? {
        tables.push(row.get::<_, String>(0)?);
    }
    if app_id == APPLICATION_ID {
        return Ok(if version >= 1 {
            Found::Pagelab(version)
        } else {
            Found::Damaged(format!(
                "pagelab's application_id with schema version {version}"
            ))
        });
    }
    if app_id == 0 && version == 0 && tables.is_empty() {
        return Ok(Found::Fresh);
    }
    let mut detail = format!("application_id {app_id:#x}");
    if !tables.is_empty() {
        let more = if tables.len() > 4 { ", ..." } else { "" };
        tables.truncate(4);
        let _ = write!(detail, ", holds {}{more}", tables.join(", "));
    }
    Ok(Found::Foreign(detail))
}

/// A connection to the results store. One per thread: it is `Send` but not `Sync`; several
/// `Store`s (in threads or processes) may use the same file at once.
pub struct Store {
    conn: Connection,
    path: PathBuf,
    /// Opened with [`Store::open_read`]: every write is refused up front.
    read_only: bool,
    /// The schema version of the file (below [`SCHEMA_VERSION`] only when opened for reading).
    version: i64,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store")
            .field("path", &self.path)
            .field("read_only", &self.read_only)
            .finish()
    }
}

/// [`Store::default_path`] with its inputs given, so it can be tested without touching the
/// process environment.
fn default_path_in(
    env: Option<OsString>,
    data_dir: Option<PathBuf>,
) -> Result<PathBuf, StoreError> {
    match env {
        Some(p) if !p.is_empty() => Ok(PathBuf::from(p)),
        _ => data_dir
            .map(|d| d.join("pagelab").join("results.db"))
            .ok_or(StoreError::NoDataDir),
    }
}

/// The SQLite side file `suffix` (`-wal`, `-shm`, `-journal`) of the database at `path`.
fn side_file(path: &Path, suffix: &str) -> PathBuf {
    let mut p = path.as_os_str().to_owned();
    p.push(suffix);
    PathBuf::from(p)
}

/// `path` as an SQLite URI with `params`, for opening with options the plain path cannot carry.
fn file_uri(path: &Path, params: &str) -> String {
    use std::os::unix::ffi::OsStrExt;
    let mut uri = String::from("file:");
    for &b in path.as_os_str().as_bytes() {
        if b.is_ascii_alphanumeric() || b"-._~/".contains(&b) {
            uri.push(b as char);
        } else {
            let _ = write!(uri, "%{b:02X}");
        }
    }
    uri.push('?');
    uri.push_str(params);
    uri
}

impl Store {
    /// Where the store is unless `--db` says otherwise: `$PAGELAB_DB` if set and non-empty (so a
    /// whole session or test suite can use another store), else the per-user data directory
    /// (`~/.local/share/pagelab/results.db`), which survives reboots unlike `/tmp`.
    pub fn default_path() -> Result<PathBuf, StoreError> {
        default_path_in(std::env::var_os(DB_ENV), dirs::data_dir())
    }

    /// Opens the store for writing, creating its directory and file if missing and bringing its
    /// schema up to [`SCHEMA_VERSION`]. A file that is not a pagelab store, is damaged, is newer
    /// than this pagelab or cannot be written is refused with nothing changed in it.
    pub fn open(path: &Path) -> Result<Store, StoreError> {
        if let Some(parent) = path.parent()
            && !parent.as_os_str().is_empty()
        {
            std::fs::create_dir_all(parent).map_err(|source| StoreError::CreateDir {
                path: path.to_path_buf(),
                source,
            })?;
        }
        if path.is_dir() {
            return Err(StoreError::CannotOpen {
                path: path.to_path_buf(),
                detail: "it is a directory".into(),
            });
        }
        precheck(path)?;
        let flags = OpenFlags::SQLITE_OPEN_READ_WRITE
            | OpenFlags::SQLITE_OPEN_CREATE
            | OpenFlags::SQLITE_OPEN_NO_MUTEX;
        let conn = Connection::open_with_flags(path, flags).map_err(|e| classify(path, e))?;
        let err = |e| classify(path, e);
        conn.busy_timeout(BUSY_TIMEOUT).map_err(err)?;
        // Everything up to the journal mode only reads, so a refused file stays as it was.
        let found = inspect(&conn).map_err(err)?;
        match found {
            Found::Foreign(detail) => {
                return Err(StoreError::NotPagelab {
                    path: path.to_path_buf(),
                    detail,
                });
            }
            Found::Damaged(detail) => {
                return Err(StoreError::Corrupt {
                    path: path.to_path_buf(),
                    detail,
                });
            }
            Found::Pagelab(v) if v > SCHEMA_VERSION => {
                return Err(StoreError::Newer {
                    path: path.to_path_buf(),
                    found: v,
                    known: SCHEMA_VERSION,
                });
            }
            Found::Pagelab(_) | Found::Fresh => {}
        }
        // SQLite silently opens a file it may not write read-only; say so now rather than at the
        // first sample.
        if conn.is_readonly(rusqlite::MAIN_DB).map_err(err)? {
            return Err(StoreError::ReadOnly {
                path: path.to_path_buf(),
            });
        }
        let _mode: String =
            retry_busy(|| conn.query_row("PRAGMA journal_mode = WAL", [], |r| r.get(0)))
                .map_err(err)?;
        conn.pragma_update(None, "foreign_keys", true)
            .map_err(err)?;
        let store = Store {
            conn,
            path: path.to_path_buf(),
            read_only: false,
            version: SCHEMA_VERSION,
        };
        if !matches!(found, Found::Pagelab(SCHEMA_VERSION)) {
            store.migrate()?;
        }
        Ok(store)
    }

    /// Applies the missing migrations, one transaction each. The version is read again under
    /// the write lock, so two processes opening a new store at once apply each migration once.
    fn migrate(&self) -> Result<(), StoreError> {
        loop {
            let done = self.write(|tx| {
                let err = |e| self.err(e);
                let v: i64 = tx
                    .pragma_query_value(None, "user_version", |r| r.get(0))
                    .map_err(err)?;
                if v > SCHEMA_VERSION {
                    return Err(StoreError::Newer {
                        path: self.path.clone(),
                        found: v,
                        known: SCHEMA_VERSION,
                    });
                }
                if v == SCHEMA_VERSION {
                    return Ok(true);
                }
                let Some(migration) = usize::try_from(v).ok().and_then(|i| MIGRATIONS.get(i))
                else {
                    return Err(StoreError::Corrupt {
                        path: self.path.clone(),
                        detail: format!("schema version {v}"),
                    });
                };
                tx.execute_batch(migration).map_err(err)?;
                tx.pragma_update(None, "user_version", v + 1).map_err(err)?;
                tx.pragma_update(None, "application_id", APPLICATION_ID)
                    .map_err(err)?;
                Ok(false)
            })?;
            if done {
                return Ok(());
            }
        }
    }

    /// Opens an existing store for reading (`runs`, `compare`, `export`). It never writes, so it
    /// works on a read-only file or directory, and on a store with an older schema; every write
    /// through it is refused with [`StoreError::ReadOnly`].
    pub fn open_read(path: &Path) -> Result<Store, StoreError> {
        let missing = || StoreError::Missing {
            path: path.to_path_buf(),
        };
        match path.try_exists() {
            Ok(true) => {}
            Ok(false) => return Err(missing()),
            Err(e) => {
                return Err(StoreError::CannotOpen {
                    path: path.to_path_buf(),
                    detail: e.to_string(),
                });
            }
        }
        if path.is_dir() {
            return Err(StoreError::CannotOpen {
                path: path.to_path_buf(),
                detail: "it is a directory".into(),
            });
        }
        precheck(path)?;
        let flags = OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX;
        let (conn, found) = match Self::open_ro(path, flags) {
            // A WAL store in a directory we may not write, with no `-shm` file left: SQLite
            // cannot set up the shared index. Nobody can write there either (a writer needs a
            // `-wal` or `-journal` file beside it), and without a `-wal` file the main file
            // holds every commit, so it can be read as immutable.
            Err(e)
                if matches!(
                    e.sqlite_error_code(),
                    Some(ErrorCode::CannotOpen | ErrorCode::ReadOnly)
                ) && !side_file(path, "-wal").exists() =>
            {
                Self::open_immutable(path).map_err(|_| classify(path, e))?
            }
            r => r.map_err(|e| classify(path, e))?,
        };
        match found {
            Found::Fresh => Err(missing()),
            Found::Foreign(detail) => Err(StoreError::NotPagelab {
                path: path.to_path_buf(),
                detail,
            }),
            Found::Damaged(detail) => Err(StoreError::Corrupt {
                path: path.to_path_buf(),
                detail,
            }),
            Found::Pagelab(v) if v > SCHEMA_VERSION => Err(StoreError::Newer {
                path: path.to_path_buf(),
                found: v,
                known: SCHEMA_VERSION,
            }),
            Found::Pagelab(v) if v < MIN_READ_VERSION => Err(StoreError::TooOld {
                path: path.to_path_buf(),
                found: v,
            }),
            Found::Pagelab(v) => Ok(Store {
                conn,
                path: path.to_path_buf(),
                read_only: true,
                version: v,
            }),
        }
    }

    /// Opens `name` (a path or a URI) read-only and inspects it.
    fn open_ro<P: AsRef<Path>>(name: P, flags: OpenFlags) -> rusqlite::Result<(Connection, Found)> {
        let conn = Connection::open_with_flags(name, flags)?;
        conn.busy_timeout(BUSY_TIMEOUT)?;
        let found = inspect(&conn)?;
        Ok((conn, found))
    }

    /// Opens the file as an immutable database: no locks, no `-shm`, no `-wal`.
    fn open_immutable(path: &Path) -> rusqlite::Result<(Connection, Found)> {
        let flags = OpenFlags::SQLITE_OPEN_READ_ONLY
            | OpenFlags::SQLITE_OPEN_NO_MUTEX
            | OpenFlags::SQLITE_OPEN_URI;
        Self::open_ro(file_uri(path, "mode=ro&immutable=1"), flags)
    }

    /// The file this store is in, for messages.
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn err(&self, e: rusqlite::Error) -> StoreError {
        classify(&self.path, e)
    }

    fn rejected(&self, reason: String) -> StoreError {
        StoreError::Rejected {
            path: self.path.clone(),
            reason,
        }
    }

    /// Runs `f` in one `BEGIN IMMEDIATE` transaction: all of it is committed or none.
    fn write<T>(
        &self,
        f: impl FnOnce(&Transaction<'_>) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        if self.read_only {
            return Err(StoreError::ReadOnly {
                path: self.path.clone(),
            });
        }
        let tx = Transaction::new_unchecked(&self.conn, TransactionBehavior::Immediate)
            .map_err(|e| self.err(e))?;
        let v = f(&tx)?;
        tx.commit().map_err(|e| self.err(e))?;
        Ok(v)
    }

    /// Refuses NaN and infinities: SQLite would store a NaN as NULL, and statistics over an
    /// infinite sample mean nothing.
    fn check_finite(
        &self,
        what: impl FnOnce() -> String,
        values: &[f64],
    ) -> Result<(), StoreError> {
        match values.iter().position(|v| !v.is_finite()) {
            None => Ok(()),
            Some(i) => Err(self.rejected(format!(
                "{} value #{i} is {}; only finite numbers can be stored",
                what(),
                values[i]
            ))),
        }
    }

    fn check_meta(&self, meta: &RunMeta) -> Result<(), StoreError> {
        if meta.label.is_empty() {
            return Err(self.rejected("a run needs a non-empty label".into()));
        }
        Ok(())
    }

    /// Fails unless `run` exists and is still running: a finished run is never changed.
    fn check_running(&self, tx: &Transaction<'_>, run: i64) -> Result<(), StoreError> {
        let status: Option<String> = tx
            .query_row("SELECT status FROM runs WHERE id = ?1", [run], |r| r.get(0))
            .map(Some)
            .or_else(|e| match e {
                rusqlite::Error::QueryReturnedNoRows => Ok(None),
                e => Err(e),
            })
            .map_err(|e| self.err(e))?;
        match status.as_deref() {
            None => Err(StoreError::NoSuchRun {
                path: self.path.clone(),
                run,
            }),
            Some("running") => Ok(()),
            Some(s) => Err(self.rejected(format!(
                "run {run} is already {s}; a finished run cannot be changed"
            ))),
        }
    }

    fn insert_run_row(
        &self,
        tx: &Transaction<'_>,
        meta: &RunMeta,
        status: Status,
        started: &str,
        finished: Option<&str>,
    ) -> Result<i64, StoreError> {
        // A run that stays running is owned by this process until it finishes it.
        let owner = (status == Status::Running).then(Owner::current);
        let owner = owner.as_ref();
        tx.execute(
            "INSERT INTO runs (label, workload, target, origin, profile, profile_toml, host_json,
                machine, experiment, pagelab_version, command, status, started, finished,
                owner_pid, owner_start, owner_boot, owner_host)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14,
                ?15, ?16, ?17, ?18)",
            rusqlite::params![
                meta.label,
                meta.workload,
                meta.target,
                meta.origin.as_str(),
                meta.profile,
                meta.profile_toml,
                meta.host_json,
                meta.machine,
                meta.experiment,
                meta.pagelab_version,
                meta.command,
                status.as_str(),
                started,
                finished,
                owner.map(|o| o.pid),
                owner
                    .and_then(|o| o.start)
                    .and_then(|t| i64::try_from(t).ok()),
                owner.and_then(|o| o.boot_id.as_deref()),
                owner.and_then(|o| o.host.as_deref()),
            ],
        )
        .map_err(|e| self.err(e))?;
        Ok(tx.last_insert_rowid())
    }

    /// Appends `values` to `(run, key, repeat)` inside `tx`; the values are already checked.
    fn insert_samples(
        &self,
        tx: &Transaction<'_>,
        run: i64,
        key: &SampleKey,
        repeat: u32,
        values: &[f64],
    ) -> Result<(), StoreError> {
        let err = |e| self.err(e);
        let stored_hib: Option<bool> = tx
            .query_row(
                "SELECT higher_is_better FROM samples
                 WHERE run_id = ?1 AND mode = ?2 AND tasks = ?3 AND metric = ?4 LIMIT 1",
                rusqlite::params![run, key.mode, key.tasks, key.metric],
                |r| r.get(0),
            )
            .map(Some)
            .or_else(|e| match e {
                rusqlite::Error::QueryReturnedNoRows => Ok(None),
                e => Err(e),
            })
            .map_err(err)?;
        if let Some(hib) = stored_hib
            && hib != key.higher_is_better
        {
            return Err(self.rejected(format!(
                "run {run} already has `{}` ({} {} tasks) with higher_is_better = {hib}, \
                 the new samples say {}",
                key.metric, key.mode, key.tasks, key.higher_is_better
            )));
        }
        let last: Option<i64> = tx
            .query_row(
                "SELECT max(seq) FROM samples
                 WHERE run_id = ?1 AND mode = ?2 AND tasks = ?3 AND metric = ?4 AND repeat = ?5",
                rusqlite::params![run, key.mode, key.tasks, key.metric, repeat],
                |r| r.get(0),
            )
            .map_err(err)?;
        let first = last.map_or(0, |s| s + 1);
        if first + values.len() as i64 > i64::from(u32::MAX) + 1 {
            return Err(self.rejected(format!(
                "run {run} `{}` repeat {repeat} would exceed {} samples",
                key.metric,
                u32::MAX
            )));
        }
        let mut stmt = tx
            .prepare_cached(
                "INSERT INTO samples (run_id, mode, tasks, metric, higher_is_better, repeat, seq,
                    value) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
            )
            .map_err(err)?;
        for (i, v) in values.iter().enumerate() {
            stmt.execute(rusqlite::params![
                run,
                key.mode,
                key.tasks,
                key.metric,
                key.higher_is_better,
                repeat,
                first + i as i64,
                v
            ])
            .map_err(err)?;
        }
        Ok(())
    }

    /// Starts a run, stored at once with status [`Status::Running`] so that whatever it measures
    /// is kept even if the process dies; returns its id for the `add_*` and `finish_run` calls.
    pub fn begin_run(&self, meta: &RunMeta) -> Result<i64, StoreError> {
        self.check_meta(meta)?;
        let now = now_rfc3339();
        self.write(|tx| self.insert_run_row(tx, meta, Status::Running, &now, None))
    }

    /// Appends one set of samples of a running run, numbered on after those already stored for
    /// the same key and repeat, in one transaction. Refused (nothing written) if a value is not
    /// finite, the run is finished or unknown, or the metric was stored with the other
    /// `higher_is_better`.
    pub fn add_samples(
        &self,
        run: i64,
        key: &SampleKey,
        repeat: u32,
        values: &[f64],
    ) -> Result<(), StoreError> {
        self.check_finite(
            || {
                format!(
                    "run {run} `{}` ({} {} tasks) repeat {repeat}",
                    key.metric, key.mode, key.tasks
                )
            },
            values,
        )?;
        self.write(|tx| {
            self.check_running(tx, run)?;
            self.insert_samples(tx, run, key, repeat, values)
        })
    }

    /// Appends several sets of samples of a running run (the metrics of one sample, say pft's
    /// `faults/cpu` and `faults/sec`) in one transaction, each numbered on after those already
    /// stored for its key and `repeat`: all of them are stored or, on any error, none.
    pub fn add_sample_sets(
        &self,
        run: i64,
        repeat: u32,
        sets: &[(SampleKey, Vec<f64>)],
    ) -> Result<(), StoreError> {
        for (key, values) in sets {
            self.check_finite(
                || {
                    format!(
                        "run {run} `{}` ({} {} tasks) repeat {repeat}",
                        key.metric, key.mode, key.tasks
                    )
                },
                values,
            )?;
        }
        self.write(|tx| {
            self.check_running(tx, run)?;
            for (key, values) in sets {
                self.insert_samples(tx, run, key, repeat, values)?;
            }
            Ok(())
        })
    }

    /// Stores the engine counters of one measured window of a running run, in one transaction.
    /// A counter name already stored for the same window is refused (nothing written).
    pub fn add_counters(
        &self,
        run: i64,
        mode: &str,
        tasks: u32,
        repeat: u32,
        counters: &[(String, f64)],
    ) -> Result<(), StoreError> {
        if let Some((name, v)) = counters.iter().find(|(_, v)| !v.is_finite()) {
            return Err(self.rejected(format!(
                "counter `{name}` of run {run} is {v}; only finite numbers can be stored"
            )));
        }
        self.write(|tx| {
            self.check_running(tx, run)?;
            let mut stmt = tx
                .prepare_cached(
                    "INSERT INTO counters (run_id, mode, tasks, repeat, name, value)
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
                )
                .map_err(|e| self.err(e))?;
            for (name, v) in counters {
                stmt.execute(rusqlite::params![run, mode, tasks, repeat, name, v])
                    .map_err(|e| match e.sqlite_error_code() {
                        Some(ErrorCode::ConstraintViolation) => self.rejected(format!(
                            "counter `{name}` is already stored for run {run} \
                             ({mode} {tasks} tasks, repeat {repeat})"
                        )),
                        _ => self.err(e),
                    })?;
            }
            Ok(())
        })
    }

    /// Ends a running run: sets its final status ([`Status::Complete`], or
    /// [`Status::Incomplete`] when stopped early, keeping what it stored) and `finished` = now.
    /// A run can be finished once; `Status::Running` is not a final status.
    pub fn finish_run(&self, run: i64, status: Status) -> Result<(), StoreError> {
        if status == Status::Running {
            return Err(self.rejected(format!(
                "run {run} cannot be finished with status `running`"
            )));
        }
        let now = now_rfc3339();
        self.write(|tx| {
            self.check_running(tx, run)?;
            tx.execute(
                "UPDATE runs SET status = ?1, finished = ?2 WHERE id = ?3",
                rusqlite::params![status.as_str(), now, run],
            )
            .map_err(|e| self.err(e))?;
            Ok(())
        })
    }

    /// Stores a whole run (an import, a projection) in one transaction: all of it or, on any
    /// error, none of it. `started` is now, and so is `finished` unless the status is
    /// `Running`. Samples for the same key and repeat given twice are appended in order.
    pub fn insert_run(&self, data: &RunData) -> Result<i64, StoreError> {
        Ok(self.insert_runs(std::slice::from_ref(data))?[0])
    }

    /// Stores several whole runs (an import of a directory holding several workloads) in one
    /// transaction, as [`Store::insert_run`] stores one: all of them or, on any error, none.
    /// Returns their ids in order.
    pub fn insert_runs(&self, runs: &[RunData]) -> Result<Vec<i64>, StoreError> {
        for data in runs {
            self.check_meta(&data.meta)?;
            for (key, repeat, values) in &data.samples {
                self.check_finite(
                    || {
                        format!(
                            "`{}` ({} {} tasks) repeat {repeat}",
                            key.metric, key.mode, key.tasks
                        )
                    },
                    values,
                )?;
            }
        }
        let now = now_rfc3339();
        self.write(|tx| {
            let mut ids = Vec::with_capacity(runs.len());
            for data in runs {
                let finished = (data.status != Status::Running).then_some(now.as_str());
                let run = self.insert_run_row(tx, &data.meta, data.status, &now, finished)?;
                for (key, repeat, values) in &data.samples {
                    self.insert_samples(tx, run, key, *repeat, values)?;
                }
                ids.push(run);
            }
            Ok(ids)
        })
    }

    /// The runs the filter selects, by id, each with its number of samples.
    pub fn runs(&self, f: &RunFilter) -> Result<Vec<StoredRun>, StoreError> {
        let (cond, params) = filter_sql(f);
        // A store read without upgrading it may predate the owner columns.
        let owner_cols = if self.version >= OWNER_VERSION {
            "owner_pid, owner_start, owner_boot, owner_host"
        } else {
            "NULL, NULL, NULL, NULL"
        };
        let sql = format!(
            "SELECT id, label, workload, target, origin, profile, profile_toml, host_json,
                machine, experiment, pagelab_version, command, status, started, finished,
                (SELECT count(*) FROM samples s WHERE s.run_id = runs.id), {owner_cols}
             FROM runs WHERE {cond} ORDER BY id"
        );
        let mut stmt = self.conn.prepare(&sql).map_err(|e| self.err(e))?;
        let rows = stmt
            .query_map(rusqlite::params_from_iter(params), |r| {
                Ok(StoredRun {
                    id: r.get(0)?,
                    meta: RunMeta {
                        label: r.get(1)?,
                        workload: r.get(2)?,
                        target: r.get(3)?,
                        origin: parse_col(r, 4)?,
                        profile: r.get(5)?,
                        profile_toml: r.get(6)?,
                        host_json: r.get(7)?,
                        machine: r.get(8)?,
                        experiment: r.get(9)?,
                        pagelab_version: r.get(10)?,
                        command: r.get(11)?,
                    },
                    status: parse_col(r, 12)?,
                    started: r.get(13)?,
                    finished: r.get(14)?,
                    nr_samples: r.get(15)?,
                    owner: match r.get::<_, Option<u32>>(16)? {
                        None => None,
                        Some(pid) => Some(Owner {
                            pid,
                            start: r.get::<_, Option<i64>>(17)?.map(|t| t as u64),
                            boot_id: r.get(18)?,
                            host: r.get(19)?,
                        }),
                    },
                })
            })
            .map_err(|e| self.err(e))?;
        rows.collect::<Result<_, _>>().map_err(|e| self.err(e))
    }

    /// Deletes the runs the filter selects, with their samples and counters, in one
    /// transaction; returns how many runs. An empty filter is refused rather than taken to mean
    /// "everything": use [`Store::delete_all_runs`] for that.
    pub fn delete_runs(&self, f: &RunFilter) -> Result<usize, StoreError> {
        if *f == RunFilter::default() {
            return Err(StoreError::EmptyFilter {
                path: self.path.clone(),
            });
        }
        let (cond, params) = filter_sql(f);
        self.write(|tx| {
            tx.execute(
                &format!("DELETE FROM runs WHERE {cond}"),
                rusqlite::params_from_iter(params),
            )
            .map_err(|e| self.err(e))
        })
    }

    /// Deletes every run, with its samples and counters, in one transaction; returns how many.
    /// Run ids are not reused afterwards.
    pub fn delete_all_runs(&self) -> Result<usize, StoreError> {
        self.write(|tx| tx.execute("DELETE FROM runs", []).map_err(|e| self.err(e)))
    }

    /// The samples of the given runs (none for an empty list), ordered by run id, mode, tasks,
    /// metric, repeat and seq, each with the run's label, workload and origin for grouping.
    ///
    /// This holds every sample in memory: for small selections (a run just measured, tests).
    /// Anything that reads a selection of any size uses [`Store::for_each_sample`],
    /// [`Store::sample_stats`] and [`Store::best_samples`], which never do.
    pub fn samples(&self, run_ids: &[i64]) -> Result<Vec<SampleRow>, StoreError> {
        let mut out = Vec::new();
        self.for_each_sample(run_ids, |s| {
            out.push(s.clone());
            Ok::<(), StoreError>(())
        })?;
        Ok(out)
    }

    /// The label, workload and origin of each of the given runs, by id.
    fn run_names(
        &self,
        run_ids: &[i64],
    ) -> Result<HashMap<i64, (String, String, Origin)>, StoreError> {
        let mut stmt = self
            .conn
            .prepare(
                "SELECT id, label, workload, origin FROM runs
                 WHERE id IN (SELECT value FROM json_each(?1))",
            )
            .map_err(|e| self.err(e))?;
        let rows = stmt
            .query_map([json_ids(run_ids)], |r| {
                Ok((r.get(0)?, (r.get(1)?, r.get(2)?, parse_col(r, 3)?)))
            })
            .map_err(|e| self.err(e))?;
        rows.collect::<Result<_, _>>().map_err(|e| self.err(e))
    }

    /// Calls `f` with each sample of the given runs, in the order of [`Store::samples`], as the
    /// rows are read: memory holds one row whatever the selection holds, so an export of
    /// millions of samples streams. The row passed to `f` is reused from call to call. Stops at
    /// the first error, of the store or of `f`.
    pub fn for_each_sample<E: From<StoreError>>(
        &self,
        run_ids: &[i64],
        mut f: impl FnMut(&SampleRow) -> Result<(), E>,
    ) -> Result<(), E> {
        if run_ids.is_empty() {
            return Ok(());
        }
        let names = self.run_names(run_ids)?;
        let mut stmt = self
            .conn
            .prepare(
                "SELECT run_id, mode, tasks, metric, higher_is_better, repeat, seq, value
                 FROM samples
                 WHERE run_id IN (SELECT value FROM json_each(?1))
                 ORDER BY run_id, mode, tasks, metric, repeat, seq",
            )
            .map_err(|e| self.err(e))?;
        let mut rows = stmt.query([json_ids(run_ids)]).map_err(|e| self.err(e))?;
        let mut cur = SampleRow {
            run_id: i64::MIN,
            label: String::new(),
            workload: String::new(),
            origin: Origin::Measured,
            key: SampleKey {
                mode: String::new(),
                tasks: 0,
                metric: String::new(),
                higher_is_better: true,
            },
            repeat: 0,
            seq: 0,
            value: 0.0,
        };
        while let Some(r) = rows.next().map_err(|e| self.err(e))? {
            let read = |cur: &mut SampleRow| -> rusqlite::Result<()> {
                let run_id: i64 = r.get(0)?;
                if run_id != cur.run_id {
                    cur.run_id = run_id;
                    // A run deleted since `run_names` read it: its samples went with it.
                    if let Some((label, workload, origin)) = names.get(&run_id) {
                        label.clone_into(&mut cur.label);
                        workload.clone_into(&mut cur.workload);
                        cur.origin = *origin;
                    }
                }
                set_text(&mut cur.key.mode, r, 1)?;
                cur.key.tasks = r.get(2)?;
                set_text(&mut cur.key.metric, r, 3)?;
                cur.key.higher_is_better = r.get(4)?;
                cur.repeat = r.get(5)?;
                cur.seq = r.get(6)?;
                cur.value = r.get(7)?;
                Ok(())
            };
            read(&mut cur).map_err(|e| self.err(e))?;
            f(&cur)?;
        }
        Ok(())
    }

    /// The [`Summary`] of every sample set of the given runs, one per (run, mode, tasks, metric,
    /// direction), ordered by run id, mode, tasks and metric (as [`Store::samples`] orders
    /// samples, so that the first appearance of a metric is the same). Built while the rows are
    /// read: memory holds one summary per set, whatever the sets hold.
    pub fn sample_stats(&self, run_ids: &[i64]) -> Result<Vec<SetSummary>, StoreError> {
        if run_ids.is_empty() {
            return Ok(Vec::new());
        }
        let names = self.run_names(run_ids)?;
        let mut stmt = self
            .conn
            .prepare(
                "SELECT run_id, mode, tasks, metric, higher_is_better, value, repeat FROM samples
                 WHERE run_id IN (SELECT value FROM json_each(?1))
                 ORDER BY run_id, mode, tasks, metric",
            )
            .map_err(|e| self.err(e))?;
        let mut rows = stmt.query([json_ids(run_ids)]).map_err(|e| self.err(e))?;
        let mut out: Vec<SetSummary> = Vec::new();
        // Where each set is in `out`; rows of one set normally come together, and the last set
        // is checked first without building a key.
        let mut index: HashMap<(i64, SampleKey), usize> = HashMap::new();
        let mut last: Option<usize> = None;
        while let Some(r) = rows.next().map_err(|e| self.err(e))? {
            let mut add = || -> rusqlite::Result<()> {
                let run_id: i64 = r.get(0)?;
                let mode = text(r, 1)?;
                let tasks: u32 = r.get(2)?;
                let metric = text(r, 3)?;
                let higher_is_better: bool = r.get(4)?;
                let value: f64 = r.get(5)?;
                let repeat: u32 = r.get(6)?;
                let same = |s: &SetSummary| {
                    s.run_id == run_id
                        && s.key.tasks == tasks
                        && s.key.higher_is_better == higher_is_better
                        && s.key.mode == mode
                        && s.key.metric == metric
                };
                let i = match last {
                    Some(i) if same(&out[i]) => i,
                    _ => {
                        let key = SampleKey {
                            mode: mode.to_string(),
                            tasks,
                            metric: metric.to_string(),
                            higher_is_better,
                        };
                        *index.entry((run_id, key.clone())).or_insert_with(|| {
                            let (label, workload, origin) =
                                names.get(&run_id).cloned().unwrap_or_else(|| {
                                    (String::new(), String::new(), Origin::Measured)
                                });
                            out.push(SetSummary {
                                run_id,
                                label,
                                workload,
                                origin,
                                key,
                                summary: Summary::new(),
                                repeats: Vec::new(),
                            });
                            out.len() - 1
                        })
                    }
                };
                out[i].push(repeat, value);
                last = Some(i);
                Ok(())
            };
            add().map_err(|e| self.err(e))?;
        }
        Ok(out)
    }

    /// The summaries of the best samples of one sample set pooled over the given runs: for each
    /// length in `lens`, of the `len` best (highest for a higher-is-better metric, else lowest),
    /// as `BHmean-P` and `BAmean-P` need them. SQLite sorts (spilling to temporary files, not
    /// memory) and only the longest prefix asked for is read. The query has no `LIMIT` on
    /// purpose: with one, SQLite keeps the best rows in a temporary B-tree instead of its
    /// merge sorter, which for millions of rows is many times slower.
    pub fn best_samples(
        &self,
        run_ids: &[i64],
        key: &SampleKey,
        lens: &[u64],
    ) -> Result<Vec<Summary>, StoreError> {
        let longest = lens.iter().copied().max().unwrap_or(0);
        let mut out = vec![Summary::new(); lens.len()];
        if run_ids.is_empty() || longest == 0 {
            return Ok(out);
        }
        let order = if key.higher_is_better { "DESC" } else { "ASC" };
        let mut stmt = self
            .conn
            .prepare(&format!(
                "SELECT value FROM samples
                 WHERE run_id IN (SELECT value FROM json_each(?1))
                   AND mode = ?2 AND tasks = ?3 AND metric = ?4 AND higher_is_better = ?5
                 ORDER BY value {order}"
            ))
            .map_err(|e| self.err(e))?;
        let mut rows = stmt
            .query(rusqlite::params![
                json_ids(run_ids),
                key.mode,
                key.tasks,
                key.metric,
                key.higher_is_better,
            ])
            .map_err(|e| self.err(e))?;
        let mut prefix = Summary::new();
        while prefix.n() < longest
            && let Some(r) = rows.next().map_err(|e| self.err(e))?
        {
            prefix.push(r.get(0).map_err(|e| self.err(e))?);
            for (s, &len) in out.iter_mut().zip(lens) {
                if len == prefix.n() {
                    *s = prefix;
                }
            }
        }
        // Fewer rows than asked for: the longer prefixes are the whole set.
        for (s, &len) in out.iter_mut().zip(lens) {
            if len > prefix.n() {
                *s = prefix;
            }
        }
        Ok(out)
    }

    /// The counters of the given runs (none for an empty list), ordered by run id, mode, tasks,
    /// repeat and name.
    pub fn counters(&self, run_ids: &[i64]) -> Result<Vec<CounterRow>, StoreError> {
        if run_ids.is_empty() {
            return Ok(Vec::new());
        }
        let mut stmt = self
            .conn
            .prepare(
                "SELECT run_id, mode, tasks, repeat, name, value FROM counters
                 WHERE run_id IN (SELECT value FROM json_each(?1))
                 ORDER BY run_id, mode, tasks, repeat, name",
            )
            .map_err(|e| self.err(e))?;
        let rows = stmt
            .query_map([json_ids(run_ids)], |r| {
                Ok(CounterRow {
                    run_id: r.get(0)?,
                    mode: r.get(1)?,
                    tasks: r.get(2)?,
                    repeat: r.get(3)?,
                    name: r.get(4)?,
                    value: r.get(5)?,
                })
            })
            .map_err(|e| self.err(e))?;
        rows.collect::<Result<_, _>>().map_err(|e| self.err(e))
    }

    /// Each counter of the given runs summed over its measured windows, with the number of
    /// windows, per (run, mode, tasks, name) and in that order: what a report's counter tables
    /// (means over windows) need, aggregated by SQLite rather than read row by row.
    pub fn counter_totals(&self, run_ids: &[i64]) -> Result<Vec<CounterTotal>, StoreError> {
        if run_ids.is_empty() {
            return Ok(Vec::new());
        }
        let mut stmt = self
            .conn
            .prepare(
                "SELECT run_id, mode, tasks, name, count(*), sum(value) FROM counters
                 WHERE run_id IN (SELECT value FROM json_each(?1))
                 GROUP BY run_id, mode, tasks, name
                 ORDER BY run_id, mode, tasks, name",
            )
            .map_err(|e| self.err(e))?;
        let rows = stmt
            .query_map([json_ids(run_ids)], |r| {
                Ok(CounterTotal {
                    run_id: r.get(0)?,
                    mode: r.get(1)?,
                    tasks: r.get(2)?,
                    name: r.get(3)?,
                    windows: r.get(4)?,
                    sum: r.get(5)?,
                })
            })
            .map_err(|e| self.err(e))?;
        rows.collect::<Result<_, _>>().map_err(|e| self.err(e))
    }

    /// Every label with how many runs carry it, in order of first appearance (lowest run id), the
    /// order in which `compare` shows columns by default.
    pub fn labels(&self) -> Result<Vec<(String, usize)>, StoreError> {
        let mut stmt = self
            .conn
            .prepare("SELECT label, count(*) FROM runs GROUP BY label ORDER BY min(id)")
            .map_err(|e| self.err(e))?;
        let rows = stmt
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
            .map_err(|e| self.err(e))?;
        rows.collect::<Result<_, _>>().map_err(|e| self.err(e))
    }
}

/// A text column, borrowed from the row.
fn text<'r>(r: &'r Row<'_>, i: usize) -> rusqlite::Result<&'r str> {
    r.get_ref(i)?
        .as_str()
        .map_err(|e| rusqlite::Error::FromSqlConversionFailure(i, Type::Text, e.into()))
}

/// Sets `dst` to a text column, reusing its allocation.
fn set_text(dst: &mut String, r: &Row<'_>, i: usize) -> rusqlite::Result<()> {
    let t = text(r, i)?;
    if dst != t {
        dst.clear();
        dst.push_str(t);
    }
    Ok(())
}

/// A counter of one run summed over its measured windows (see [`Store::counter_totals`]).
#[derive(Clone, Debug, PartialEq)]
pub struct CounterTotal {
    pub run_id: i64,
    pub mode: String,
    pub tasks: u32,
    pub name: String,
    /// How many windows stored it.
    pub windows: u64,
    pub sum: f64,
}

/// Reads a text column into an enum (`Origin`, `Status`).
fn parse_col<T: std::str::FromStr<Err = UnknownName>>(
    r: &Row<'_>,
    i: usize,
) -> rusqlite::Result<T> {
    let s: String = r.get(i)?;
    s.parse().map_err(|e: UnknownName| {
        rusqlite::Error::FromSqlConversionFailure(i, Type::Text, Box::new(e))
    })
}

fn json_ids(ids: &[i64]) -> String {
    serde_json::to_string(ids).expect("a list of integers is JSON")
}

/// The `WHERE` condition and its parameters for a filter; `1` for an empty one.
fn filter_sql(f: &RunFilter) -> (String, Vec<Value>) {
    let mut conds = Vec::new();
    let mut params = Vec::new();
    if !f.ids.is_empty() {
        conds.push("id IN (SELECT value FROM json_each(?))");
        params.push(Value::Text(json_ids(&f.ids)));
    }
    if !f.labels.is_empty() {
        conds.push("label IN (SELECT value FROM json_each(?))");
        params.push(Value::Text(
            serde_json::to_string(&f.labels).expect("a list of strings is JSON"),
        ));
    }
    let mut eq = |col, v: Option<&str>| {
        if let Some(v) = v {
            conds.push(col);
            params.push(Value::Text(v.to_owned()));
        }
    };
    eq("workload = ?", f.workload.as_deref());
    eq("origin = ?", f.origin.map(Origin::as_str));
    eq("status = ?", f.status.map(Status::as_str));
    eq("experiment = ?", f.experiment.as_deref());
    if conds.is_empty() {
        ("1".into(), params)
    } else {
        (conds.join(" AND "), params)
    }
}

/// Now as RFC 3339 in UTC to the second, e.g. `2026-11-22T04:55:01Z`.
pub fn now_rfc3339() -> String {
    let secs = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    rfc3339(secs)
}

/// Seconds since the Unix epoch as RFC 3339 UTC.
fn rfc3339(secs: u64) -> String {
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    let (y, m, d) = civil_from_days(days);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem / 60 % 60,
        rem % 60
    )
}

/// (year, month, day) of a day number counted from 1970-01-01, in the proleptic Gregorian
/// calendar (Howard Hinnant's `civil_from_days`).
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097); // [0, 146096]
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365; // [0, 399]
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100); // [0, 365]
    let mp = (5 * doy + 2) / 153; // [0, 11], March first
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32; // [1, 31]
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32; // [1, 12]
    (if m <= 2 { y + 1 } else { y }, m, d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc3339_formats_known_instants() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339(951_868_799), "2000-02-29T23:59:59Z");
        assert_eq!(rfc3339(1_795_323_301), "2026-11-22T04:55:01Z");
        assert_eq!(rfc3339(4_107_542_400), "2100-03-01T00:00:00Z");
        assert_eq!(rfc3339(86_399), "1970-01-01T23:59:59Z");
        let now = now_rfc3339();
        assert_eq!(now.len(), 20, "{now}");
        assert!(now.as_str() > "2024-01-01T00:00:00Z", "{now}");
    }

    #[test]
    fn civil_from_days_matches_a_day_by_day_walk() {
        let (mut y, mut m, mut d) = (1970i64, 1u32, 1u32);
        for z in 0..200_000 {
            assert_eq!(civil_from_days(z), (y, m, d), "day {z}");
            let leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
            let len = match m {
                2 if leap => 29,
                2 => 28,
                4 | 6 | 9 | 11 => 30,
                _ => 31,
            };
            d += 1;
            if d > len {
                d = 1;
                m += 1;
                if m > 12 {
                    m = 1;
                    y += 1;
                }
            }
        }
    }

    #[test]
    fn default_path_prefers_a_non_empty_env_var() {
        let data = Some(PathBuf::from("/home/u/.local/share"));
        assert_eq!(
            default_path_in(Some("/tmp/x.db".into()), data.clone()).unwrap(),
            PathBuf::from("/tmp/x.db")
        );
        assert_eq!(
            default_path_in(Some("".into()), data.clone()).unwrap(),
            PathBuf::from("/home/u/.local/share/pagelab/results.db")
        );
        assert_eq!(
            default_path_in(None, data).unwrap(),
            PathBuf::from("/home/u/.local/share/pagelab/results.db")
        );
        let e = default_path_in(None, None).unwrap_err();
        assert!(matches!(e, StoreError::NoDataDir));
        assert!(e.to_string().contains(DB_ENV), "{e}");
        // The real lookup agrees with the helper fed from the real environment.
        assert_eq!(
            Store::default_path().ok(),
            default_path_in(std::env::var_os(DB_ENV), dirs::data_dir()).ok()
        );
    }

    #[test]
    fn file_uri_escapes_what_a_uri_would_misread() {
        assert_eq!(
            file_uri(Path::new("/a b/c?d#e%f.db"), "mode=ro"),
            "file:/a%20b/c%3Fd%23e%25f.db?mode=ro"
        );
    }

    #[test]
    fn immutable_fallback_reads_a_wal_store() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("odd name?.db");
        let store = Store::open(&path).unwrap();
        let meta = RunMeta {
            label: "l".into(),
            workload: "w".into(),
            target: "engine".into(),
            origin: Origin::Measured,
            profile: None,
            profile_toml: None,
            host_json: None,
            machine: None,
            experiment: None,
            pagelab_version: "0".into(),
            command: "c".into(),
        };
        let id = store.begin_run(&meta).unwrap();
        drop(store);
        let (conn, found) = Store::open_immutable(&path).unwrap();
        assert!(matches!(found, Found::Pagelab(SCHEMA_VERSION)));
        let n: i64 = conn
            .query_row("SELECT count(*) FROM runs WHERE id = ?1", [id], |r| {
                r.get(0)
            })
            .unwrap();
        assert_eq!(n, 1);
    }
}
