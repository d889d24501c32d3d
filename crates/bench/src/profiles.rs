//! The shipped profiles (`profiles/*.toml`), embedded in the binary so that `pagelab` works from
//! any directory, and lookup of a profile by name or by path to a user's own file.

use std::path::{Path, PathBuf};

use pagelab_mm::Policy;
use pagelab_mm::policy::PolicyError;

/// `(name, TOML text)` of every shipped profile.
pub const BUILTIN: &[(&str, &str)] = &[
    (
        "linux-2.6.13",
        include_str!("../../../profiles/linux-2.6.13.toml"),
    ),
    (
        "linux-2.6.13-prezero",
        include_str!("../../../profiles/linux-2.6.13-prezero.toml"),
    ),
    (
        "linux-2.6.13-split-ptl",
        include_str!("../../../profiles/linux-2.6.13-split-ptl.toml"),
    ),
    (
        "linux-2.6.13-rss-delta",
        include_str!("../../../profiles/linux-2.6.13-rss-delta.toml"),
    ),
    (
        "linux-2.6.13-atomic",
        include_str!("../../../profiles/linux-2.6.13-atomic.toml"),
    ),
    (
        "linux-2.6.13-atomic-rss-delta",
        include_str!("../../../profiles/linux-2.6.13-atomic-rss-delta.toml"),
    ),
    (
        "linux-2.6.13-prefault",
        include_str!("../../../profiles/linux-2.6.13-prefault.toml"),
    ),
    (
        "vanilla-4.9",
        include_str!("../../../profiles/vanilla-4.9.toml"),
    ),
    ("hopcpu", include_str!("../../../profiles/hopcpu.toml")),
    (
        "linux-4.15",
        include_str!("../../../profiles/linux-4.15.toml"),
    ),
    (
        "large-zone-batch",
        include_str!("../../../profiles/large-zone-batch.toml"),
    ),
    (
        "linux-6.2",
        include_str!("../../../profiles/linux-6.2.toml"),
    ),
    (
        "linux-6.7",
        include_str!("../../../profiles/linux-6.7.toml"),
    ),
    (
        "folios-put-parent",
        include_str!("../../../profiles/folios-put-parent.toml"),
    ),
    (
        "folios-put",
        include_str!("../../../profiles/folios-put.toml"),
    ),
    (
        "folio-batch-31",
        include_str!("../../../profiles/folio-batch-31.toml"),
    ),
    (
        "linux-6.15",
        include_str!("../../../profiles/linux-6.15.toml"),
    ),
    (
        "linux-6.15-no-entry-prefetch",
        include_str!("../../../profiles/linux-6.15-no-entry-prefetch.toml"),
    ),
    (
        "lru-lock-base",
        include_str!("../../../profiles/lru-lock-base.toml"),
    ),
    (
        "lru-lock-splice",
        include_str!("../../../profiles/lru-lock-splice.toml"),
    ),
    (
        "mm-unstable-20230210",
        include_str!("../../../profiles/mm-unstable-20230210.toml"),
    ),
    ("pvl-v2", include_str!("../../../profiles/pvl-v2.toml")),
    (
        "pvl-refcount",
        include_str!("../../../profiles/pvl-refcount.toml"),
    ),
    ("rcu-vma", include_str!("../../../profiles/rcu-vma.toml")),
    ("mglru", include_str!("../../../profiles/mglru.toml")),
    (
        "mglru-bulk",
        include_str!("../../../profiles/mglru-bulk.toml"),
    ),
    ("llfree", include_str!("../../../profiles/llfree.toml")),
    ("range-vm", include_str!("../../../profiles/range-vm.toml")),
];

/// A loaded profile: its name, its policy and the text it came from.
#[derive(Clone, Debug)]
pub struct Profile {
    pub name: String,
    pub policy: Policy,
    pub source: String,
}

/// Why a profile could not be loaded. Each message is one line and says what to do.
#[derive(Debug, thiserror::Error)]
pub enum ProfileError {
    #[error(
        "unknown profile `{0}`; shipped profiles: {names} (or give a path to a .toml file)",
        names = BUILTIN.iter().map(|(n, _)| *n).collect::<Vec<_>>().join(", ")
    )]
    Unknown(String),
    #[error("shipped profile {name} is invalid: {source}")]
    ShippedInvalid { name: String, source: PolicyError },
    #[error("cannot read profile {}: {source}", path.display())]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("profile {}: {source}", path.display())]
    Invalid { path: PathBuf, source: PolicyError },
    /// A file takes a shipped profile's name but sets other values (see [`load`]).
    #[error(
        "profile {} is named `{name}` like a shipped profile but differs from it ({changed}); give it a name of its own (name = \"...\") so that its runs are not stored under the shipped label",
        path.display()
    )]
    ShippedName {
        path: PathBuf,
        name: String,
        /// The keys that differ, `key old -> new`, comma-separated.
        changed: String,
    },
}

/// Load a profile by shipped name, or from a path (anything containing `/` or ending `.toml`).
pub fn load(name_or_path: &str) -> Result<Profile, ProfileError> {
    let looks_like_path = name_or_path.contains('/') || name_or_path.ends_with(".toml");
    if !looks_like_path {
        let Some((name, text)) = BUILTIN.iter().find(|(n, _)| *n == name_or_path) else {
            return Err(ProfileError::Unknown(name_or_path.to_string()));
        };
        let policy =
            Policy::from_toml_str(text).map_err(|source| ProfileError::ShippedInvalid {
                name: name.to_string(),
                source,
            })?;
        return Ok(Profile {
            name: policy.name.clone().unwrap_or_else(|| name.to_string()),
            policy,
            source: text.to_string(),
        });
    }
    let path = Path::new(name_or_path);
    let text = std::fs::read_to_string(path).map_err(|source| ProfileError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    let policy = Policy::from_toml_str(&text).map_err(|source| ProfileError::Invalid {
        path: path.to_path_buf(),
        source,
    })?;
    let stem = path
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|| name_or_path.to_string());
    let name = policy.name.clone().unwrap_or(stem);
    refuse_shipped_name(&name, &policy, path)?;
    Ok(Profile {
        name,
        policy,
        source: text,
    })
}

/// A file given by path may not take a shipped profile's name unless it says the same thing:
/// runs are stored under the profile's name, so a changed copy named `linux-4.15` would put its
/// rows beside the real `linux-4.15` ones, and compare would pool them. Identical copies are
/// harmless (their rows are the shipped profile's), so they load.
fn refuse_shipped_name(name: &str, policy: &Policy, path: &Path) -> Result<(), ProfileError> {
    let Some((_, text)) = BUILTIN.iter().find(|(n, _)| *n == name) else {
        return Ok(());
    };
    let shipped = Policy::from_toml_str(text).map_err(|source| ProfileError::ShippedInvalid {
        name: name.to_string(),
        source,
    })?;
    let unnamed = |p: &Policy| Policy {
        name: None,
        ..p.clone()
    };
    if unnamed(&shipped) == unnamed(policy) {
        return Ok(());
    }
    let mut changed: Vec<String> = diff(&shipped, policy)
        .into_iter()
        .map(|(k, a, b)| format!("{k} {a} -> {b}"))
        .collect();
    if shipped.description != policy.description {
        changed.push("description".into());
    }
    Err(ProfileError::ShippedName {
        path: path.to_path_buf(),
        name: name.to_string(),
        changed: changed.join(", "),
    })
}

/// Test helper: the names of the `*.toml` files in the repository's `dir`, sorted.
#[cfg(test)]
pub(crate) fn toml_stems(dir: &str) -> Vec<String> {
    let path = format!("{}/../../{dir}", env!("CARGO_MANIFEST_DIR"));
    let mut stems: Vec<String> = std::fs::read_dir(&path)
        .unwrap()
        .filter_map(|e| {
            let p = e.unwrap().path();
            (p.extension()? == "toml")
                .then(|| p.file_stem().unwrap().to_string_lossy().into_owned())
        })
        .collect();
    stems.sort();
    stems
}

/// Test helper: the files embedded as `builtin` are exactly the `*.toml` files of the
/// repository's `dir` (so a file added without embedding it, or the reverse, fails a test).
#[cfg(test)]
pub(crate) fn assert_embedded_match_dir(dir: &str, builtin: &[(&str, &str)]) {
    let on_disk = toml_stems(dir);
    let mut shipped: Vec<String> = builtin.iter().map(|(n, _)| n.to_string()).collect();
    shipped.sort();
    assert_eq!(on_disk, shipped, "{dir}/ and the embedded list differ");
}

/// Every key of a profile with its value, dotted (`pcp.batch = 31`), defaults filled in.
pub fn flatten(p: &Policy) -> Vec<(String, String)> {
    fn walk(prefix: &str, v: &toml::Value, out: &mut Vec<(String, String)>) {
        match v {
            toml::Value::Table(t) => {
                for (k, v) in t {
                    let key = if prefix.is_empty() {
                        k.clone()
                    } else {
                        format!("{prefix}.{k}")
                    };
                    walk(&key, v, out);
                }
            }
            other => out.push((prefix.to_string(), other.to_string())),
        }
    }
    let v: toml::Value = toml::from_str(&p.to_toml_string()).expect("a policy writes valid TOML");
    let mut out = Vec::new();
    walk("", &v, &mut out);
    out
}

/// The keys whose values differ between two profiles: `(key, value in a, value in b)`, in the
/// order the keys are written. The name and description are left out: they always differ.
pub fn diff(a: &Policy, b: &Policy) -> Vec<(String, String, String)> {
    let fb = flatten(b);
    flatten(a)
        .into_iter()
        .filter(|(k, _)| k != "name" && k != "description")
        .filter_map(|(k, va)| {
            let vb = fb
                .iter()
                .find(|(kb, _)| *kb == k)
                .map_or_else(|| "-".to_string(), |(_, v)| v.clone());
            (va != vb).then_some((k, va, vb))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_shipped_profile_parses_and_is_named_after_its_file() {
        for (name, _) in BUILTIN {
            let p = load(name).unwrap();
            assert_eq!(&p.name, name);
            assert!(p.policy.description.is_some(), "{name} has no description");
        }
    }

    #[test]
    fn shipped_list_matches_the_directory() {
        assert_embedded_match_dir("profiles", BUILTIN);
    }

    #[test]
    fn diff_names_exactly_the_changed_keys() {
        let a = load("linux-2.6.13").unwrap().policy;
        let b = load("linux-2.6.13-split-ptl").unwrap().policy;
        assert_eq!(
            diff(&a, &b),
            vec![(
                "mm.ptl".to_string(),
                "\"mm\"".to_string(),
                "\"split\"".to_string()
            )]
        );
        assert!(diff(&a, &a).is_empty());
        let c = load("pvl-v2").unwrap().policy;
        let keys: Vec<String> = diff(&a, &c).into_iter().map(|d| d.0).collect();
        assert!(keys.contains(&"mm.vma_lock".to_string()), "{keys:?}");
        assert!(
            flatten(&a)
                .iter()
                .any(|(k, v)| k == "pcp.batch" && v == "15")
        );
        // The allocator switch is a key like any other: the llfree profile differs from
        // linux-6.7 in it and in the per-CPU lists it replaces.
        let l67 = load("linux-6.7").unwrap().policy;
        let ll = load("llfree").unwrap().policy;
        let keys: Vec<String> = diff(&l67, &ll).into_iter().map(|d| d.0).collect();
        assert_eq!(
            keys,
            ["alloc.allocator", "pcp.lists", "pcp.tune"],
            "{keys:?}"
        );
    }

    #[test]
    fn lameter_2005_profiles_differ_from_2_6_13_only_where_they_should() {
        let base = load("linux-2.6.13").unwrap().policy;
        let keys = |name: &str| -> Vec<String> {
            diff(&base, &load(name).unwrap().policy)
                .into_iter()
                .map(|(k, _, _)| k)
                .collect()
        };
        assert_eq!(keys("linux-2.6.13-atomic"), ["mm.ptl"]);
        assert_eq!(keys("linux-2.6.13-atomic-rss-delta"), ["mm.ptl", "mm.rss"]);
        assert_eq!(keys("linux-2.6.13-prefault"), ["mm.anon_prefault"]);
        assert_eq!((base.lru.batch, base.mm.anon_prefault), (16, 0));
    }

    #[test]
    fn rcu_vma_is_linux_6_7_with_lock_free_faults() {
        let base = load("linux-6.7").unwrap().policy;
        let rcu = load("rcu-vma").unwrap().policy;
        let keys: Vec<String> = diff(&base, &rcu).into_iter().map(|(k, _, _)| k).collect();
        assert_eq!(keys, ["mm.vma_lock"]);
        assert_eq!(rcu.mm.vma_lock, pagelab_mm::policy::VmaLock::Rcu);
    }

    #[test]
    fn bad_atomic_and_prefault_values_name_the_file_and_key() {
        let dir = std::env::temp_dir().join(format!("pagelab-prof-anon-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let f = dir.join("anon.toml");
        std::fs::write(&f, "[mm]\nanon_prefault = 512\n").unwrap();
        let e = load(f.to_str().unwrap()).unwrap_err().to_string();
        assert!(
            e.contains("anon.toml") && e.contains("mm.anon_prefault") && e.contains("511"),
            "{e}"
        );
        assert!(!e.contains('\n'));
        std::fs::write(&f, "[mm]\nptl = \"cmpxchg\"\n").unwrap();
        let e = load(f.to_str().unwrap()).unwrap_err().to_string();
        assert!(
            e.contains("anon.toml") && e.contains("cmpxchg") && e.contains("atomic"),
            "{e}"
        );
        assert!(!e.contains('\n'));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn unknown_name_lists_the_shipped_ones() {
        let e = load("linux-9.9").unwrap_err();
        assert!(
            matches!(&e, ProfileError::Unknown(n) if n == "linux-9.9"),
            "{e:?}"
        );
        let e = e.to_string();
        assert!(
            e.contains("linux-4.15") && e.contains("unknown profile"),
            "{e}"
        );
        assert!(!e.contains('\n'));
    }

    #[test]
    fn user_file_errors_name_the_file() {
        let dir = std::env::temp_dir().join(format!("pagelab-prof-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let f = dir.join("mine.toml");
        std::fs::write(&f, "[pcp]\nbatch = 500\nhigh = 100\n").unwrap();
        let e = load(f.to_str().unwrap()).unwrap_err().to_string();
        assert!(e.contains("mine.toml") && e.contains("pcp.batch"), "{e}");
        std::fs::write(&f, "[pcp]\nbatch = 5\nhigh = 100\n").unwrap();
        assert_eq!(load(f.to_str().unwrap()).unwrap().name, "mine");
        assert!(
            load("/nonexistent/x.toml")
                .unwrap_err()
                .to_string()
                .contains("cannot read")
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_changed_copy_named_like_a_shipped_profile_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let shipped = BUILTIN.iter().find(|(n, _)| *n == "linux-4.15").unwrap().1;
        // The same content under the shipped name (and by file stem alone) loads.
        let same = dir.path().join("linux-4.15.toml");
        std::fs::write(&same, shipped).unwrap();
        assert_eq!(load(same.to_str().unwrap()).unwrap().name, "linux-4.15");
        let unnamed = dir.path().join("vanilla-4.9.toml");
        let vanilla = BUILTIN.iter().find(|(n, _)| *n == "vanilla-4.9").unwrap().1;
        std::fs::write(&unnamed, vanilla.replace("name = \"vanilla-4.9\"\n", "")).unwrap();
        assert_eq!(load(unnamed.to_str().unwrap()).unwrap().name, "vanilla-4.9");
        // One value changed: refused, naming the key.
        let changed = dir.path().join("mine.toml");
        std::fs::write(&changed, shipped.replace("batch = 31", "batch = 62")).unwrap();
        let e = load(changed.to_str().unwrap()).unwrap_err().to_string();
        assert!(
            e.contains("named `linux-4.15` like a shipped profile")
                && e.contains("pcp.batch 31 -> 62")
                && e.contains("mine.toml")
                && !e.contains('\n'),
            "{e}"
        );
        // The stem alone collides too.
        std::fs::write(&unnamed, "[pcp]\nbatch = 7\n").unwrap();
        let e = load(unnamed.to_str().unwrap()).unwrap_err().to_string();
        assert!(e.contains("named `vanilla-4.9`"), "{e}");
        // A name of its own loads.
        let own = shipped.replace("name = \"linux-4.15\"", "name = \"linux-4.15-b62\"");
        std::fs::write(&changed, own.replace("batch = 31", "batch = 62")).unwrap();
        assert_eq!(
            load(changed.to_str().unwrap()).unwrap().name,
            "linux-4.15-b62"
        );
    }
}
