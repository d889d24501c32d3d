//! Output files that can never destroy what they replace by accident.
//!
//! Every file pagelab writes on a user's say-so (`export --out`, `capture --out`, plots, the
//! report, a machine description from `calibrate`) goes through [`OutputFile`]:
//!
//! - a path that is the results store in use, or any SQLite database, is refused before anything
//!   is written: a results store is a notebook, and a mistyped `--out` must not wipe it;
//! - the bytes go to a temporary file in the same directory, which is renamed over the target
//!   only when everything was written and synced, so an error or an interrupt half-way leaves the
//!   old file (or no file) in place, never a truncated one.

use std::fs::File;
use std::io::{self, BufWriter, Read, Write};
use std::path::{Path, PathBuf};

/// Why an output file was refused or could not be written. Each names the path.
#[derive(Debug, thiserror::Error)]
pub enum OutputError {
    #[error("{path}: this is the results store in use; give --out another file")]
    IsStore { path: PathBuf },
    #[error(
        "{path}: this is an SQLite database (perhaps a results store); refusing to overwrite it"
    )]
    IsDatabase { path: PathBuf },
    #[error("{path}: is a directory; give a file name")]
    IsDirectory { path: PathBuf },
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
}

/// The first 16 bytes of every SQLite 3 database file.
const SQLITE_MAGIC: &[u8; 16] = b"SQLite format 3\0";

/// Whether the file at `path` starts like an SQLite database (false when it cannot be read).
pub fn is_sqlite_file(path: &Path) -> bool {
    let Ok(f) = File::open(path) else {
        return false;
    };
    let mut head = Vec::with_capacity(SQLITE_MAGIC.len());
    f.take(SQLITE_MAGIC.len() as u64)
        .read_to_end(&mut head)
        .is_ok()
        && head == SQLITE_MAGIC
}

/// Whether `a` and `b` name the same file (by device and inode once both exist, else by their
/// canonical paths, so a relative path, a symlink or `..` does not hide the store).
pub fn same_file(a: &Path, b: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    match (std::fs::metadata(a), std::fs::metadata(b)) {
        (Ok(ma), Ok(mb)) => ma.dev() == mb.dev() && ma.ino() == mb.ino(),
        _ => match (a.canonicalize(), b.canonicalize()) {
            (Ok(ca), Ok(cb)) => ca == cb,
            _ => false,
        },
    }
}

/// Refuses `path` as an output file if it is the store in use (or its `-wal`/`-shm`
/// companions), any SQLite database, or a directory. Checked before any measuring, so that a
/// long run is not wasted on an output that will be refused at the end.
pub fn check_output_path(path: &Path, store: Option<&Path>) -> Result<(), OutputError> {
    if let Some(store) = store {
        let companions = ["", "-wal", "-shm", "-journal"].map(|suffix| {
            let mut s = store.as_os_str().to_owned();
            s.push(suffix);
            PathBuf::from(s)
        });
        if companions.iter().any(|c| same_file(path, c)) {
            return Err(OutputError::IsStore {
                path: path.to_path_buf(),
            });
        }
    }
    if path.is_dir() {
        return Err(OutputError::IsDirectory {
            path: path.to_path_buf(),
        });
    }
    if is_sqlite_file(path) {
        return Err(OutputError::IsDatabase {
            path: path.to_path_buf(),
        });
    }
    Ok(())
}

/// A file being written: bytes go to a temporary file beside the target, renamed into place by
/// [`OutputFile::commit`]. Dropped without `commit` (an error, a panic), the temporary file is
/// removed and the target is untouched.
pub struct OutputFile {
    path: PathBuf,
    tmp: BufWriter<tempfile::NamedTempFile>,
}

impl OutputFile {
    /// Checks `path` with [`check_output_path`] and opens a temporary file in its directory
    /// (created if missing).
    pub fn create(path: &Path, store: Option<&Path>) -> Result<OutputFile, OutputError> {
        check_output_path(path, store)?;
        let io_err = |source| OutputError::Io {
            path: path.to_path_buf(),
            source,
        };
        let dir = match path.parent() {
            Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
            _ => PathBuf::from("."),
        };
        std::fs::create_dir_all(&dir).map_err(io_err)?;
        let tmp = tempfile::Builder::new()
            .prefix(".pagelab-out-")
            .tempfile_in(&dir)
            .map_err(io_err)?;
        Ok(OutputFile {
            path: path.to_path_buf(),
            tmp: BufWriter::new(tmp),
        })
    }

    /// The target path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Flushes, syncs and renames the temporary file over the target. The target is checked
    /// again first: it may have become the store (or a database) while the output was written.
    pub fn commit(self) -> Result<(), OutputError> {
        let path = self.path;
        let io_err = |source| OutputError::Io {
            path: path.clone(),
            source,
        };
        let tmp = self.tmp.into_inner().map_err(|e| io_err(e.into_error()))?;
        tmp.as_file().sync_all().map_err(io_err)?;
        if is_sqlite_file(&path) {
            return Err(OutputError::IsDatabase { path });
        }
        tmp.persist(&path).map_err(|e| io_err(e.error))?;
        Ok(())
    }
}

impl Write for OutputFile {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.tmp.write(buf)
    }
    fn flush(&mut self) -> io::Result<()> {
        self.tmp.flush()
    }
}

/// Writes `bytes` to `path` through an [`OutputFile`].
pub fn write_file(path: &Path, store: Option<&Path>, bytes: &[u8]) -> Result<(), OutputError> {
    let mut f = OutputFile::create(path, store)?;
    f.write_all(bytes).map_err(|source| OutputError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    f.commit()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sqlite_file(path: &Path) {
        let mut bytes = SQLITE_MAGIC.to_vec();
        bytes.resize(4096, 0);
        std::fs::write(path, bytes).unwrap();
    }

    #[test]
    fn the_store_in_use_is_refused_by_any_name() {
        let dir = tempfile::tempdir().unwrap();
        let store = dir.path().join("results.db");
        sqlite_file(&store);
        let sub = dir.path().join("sub");
        std::fs::create_dir(&sub).unwrap();
        let roundabout = sub.join("../results.db");
        for p in [&store, &roundabout] {
            let e = write_file(p, Some(&store), b"x").unwrap_err();
            assert!(matches!(e, OutputError::IsStore { .. }), "{e}");
        }
        let link = dir.path().join("link.db");
        std::os::unix::fs::symlink(&store, &link).unwrap();
        let e = write_file(&link, Some(&store), b"x").unwrap_err();
        assert!(matches!(e, OutputError::IsStore { .. }), "{e}");
        // The WAL beside the store is the store too.
        let wal = dir.path().join("results.db-wal");
        std::fs::write(&wal, b"wal").unwrap();
        let e = write_file(&wal, Some(&store), b"x").unwrap_err();
        assert!(matches!(e, OutputError::IsStore { .. }), "{e}");
        assert_eq!(std::fs::read(&store).unwrap()[..16], SQLITE_MAGIC[..]);
    }

    #[test]
    fn any_sqlite_database_is_refused_and_left_whole() {
        let dir = tempfile::tempdir().unwrap();
        let other = dir.path().join("other.sqlite");
        sqlite_file(&other);
        let e = write_file(&other, None, b"x").unwrap_err();
        assert!(matches!(e, OutputError::IsDatabase { .. }), "{e}");
        assert_eq!(std::fs::metadata(&other).unwrap().len(), 4096);
    }

    #[test]
    fn an_unfinished_output_leaves_the_old_file_and_no_temporary() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("out.csv");
        std::fs::write(&out, b"old").unwrap();
        {
            let mut f = OutputFile::create(&out, None).unwrap();
            f.write_all(b"half of the new").unwrap();
            // Dropped without commit, as on an error.
        }
        assert_eq!(std::fs::read(&out).unwrap(), b"old");
        let names: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
        assert_eq!(names.len(), 1, "the temporary file is removed");
        write_file(&out, None, b"new").unwrap();
        assert_eq!(std::fs::read(&out).unwrap(), b"new");
    }

    #[test]
    fn missing_directories_are_created_and_directories_refused() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("a/b/out.json");
        write_file(&out, None, b"{}").unwrap();
        assert_eq!(std::fs::read(&out).unwrap(), b"{}");
        let e = write_file(dir.path(), None, b"x").unwrap_err();
        assert!(matches!(e, OutputError::IsDirectory { .. }), "{e}");
    }
}
