//! Facts about the host that every benchmark report carries: a number means little without the
//! CPU, core count, kernel and memory it was measured on (mmtests records the same).

use std::fmt;

use serde::{Deserialize, Serialize};

/// What `pagelab info` prints and the results store keeps with every run.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct HostInfo {
    pub hostname: String,
    pub cpu_model: String,
    /// Logical CPUs online.
    pub cpus: usize,
    /// Distinct physical cores (`physical id`, `core id` pairs), when /proc/cpuinfo says.
    pub cores: Option<usize>,
    /// Distinct sockets.
    pub sockets: Option<usize>,
    /// `uname -r`.
    pub kernel: String,
    pub arch: String,
    pub mem_total: u64,
    pub mem_available: u64,
    pub swap_total: u64,
    /// Transparent huge page mode (`always`, `madvise` or `never`).
    pub thp: String,
    /// `v1` or `v2`.
    pub cgroup: String,
    pub pagelab_version: String,
}

fn read(path: &str) -> Option<String> {
    std::fs::read_to_string(path).ok()
}

/// The bracketed choice of a sysfs multiple-choice file: `always [madvise] never` -> `madvise`.
pub fn bracketed(s: &str) -> Option<&str> {
    let start = s.find('[')? + 1;
    let end = start + s[start..].find(']')?;
    Some(&s[start..end])
}

/// Model name, physical cores and sockets from a /proc/cpuinfo text.
pub fn parse_cpuinfo(text: &str) -> (Option<String>, Option<usize>, Option<usize>) {
    let mut model = None;
    let mut cores = std::collections::BTreeSet::new();
    let mut sockets = std::collections::BTreeSet::new();
    let mut phys = None;
    for line in text.lines() {
        let Some((k, v)) = line.split_once(':') else {
            continue;
        };
        let (k, v) = (k.trim(), v.trim());
        match k {
            "model name" | "Model" | "cpu model" if model.is_none() => model = Some(v.to_string()),
            "physical id" => {
                phys = v.parse::<u32>().ok();
                if let Some(p) = phys {
                    sockets.insert(p);
                }
            }
            "core id" => {
                if let (Some(p), Ok(c)) = (phys, v.parse::<u32>()) {
                    cores.insert((p, c));
                }
            }
            _ => {}
        }
    }
    let nz = |n: usize| (n > 0).then_some(n);
    (model, nz(cores.len()), nz(sockets.len()))
}

impl HostInfo {
    /// Read the running machine.
    pub fn detect() -> HostInfo {
        let (model, cores, sockets) = read("/proc/cpuinfo")
            .map(|t| parse_cpuinfo(&t))
            .unwrap_or((None, None, None));
        let uname = rustix::system::uname();
        let meminfo = read("/proc/meminfo").unwrap_or_default();
        let field = |n| pagelab_mm::arena::meminfo_field(&meminfo, n).unwrap_or(0);
        let thp = read("/sys/kernel/mm/transparent_hugepage/enabled")
            .and_then(|s| bracketed(&s).map(str::to_string))
            .unwrap_or_else(|| "unknown".into());
        let cgroup = if std::path::Path::new("/sys/fs/cgroup/cgroup.controllers").exists() {
            "v2"
        } else {
            "v1"
        };
        HostInfo {
            hostname: uname.nodename().to_string_lossy().into_owned(),
            cpu_model: model.unwrap_or_else(|| "unknown".into()),
            cpus: std::thread::available_parallelism().map_or(1, |n| n.get()),
            cores,
            sockets,
            kernel: uname.release().to_string_lossy().into_owned(),
            arch: uname.machine().to_string_lossy().into_owned(),
            mem_total: field("MemTotal"),
            mem_available: field("MemAvailable"),
            swap_total: field("SwapTotal"),
            thp,
            cgroup: cgroup.into(),
            pagelab_version: env!("CARGO_PKG_VERSION").into(),
        }
    }
}

impl fmt::Display for HostInfo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        use pagelab_mm::arena::human_bytes;
        let opt = |v: Option<usize>| v.map_or("unknown".to_string(), |n| n.to_string());
        writeln!(f, "host         {}", self.hostname)?;
        writeln!(f, "cpu          {}", self.cpu_model)?;
        writeln!(
            f,
            "cpus         {} logical, {} cores, {} sockets",
            self.cpus,
            opt(self.cores),
            opt(self.sockets)
        )?;
        writeln!(f, "kernel       {} ({})", self.kernel, self.arch)?;
        writeln!(
            f,
            "memory       {} total, {} available",
            human_bytes(self.mem_total),
            human_bytes(self.mem_available)
        )?;
        writeln!(f, "swap         {}", human_bytes(self.swap_total))?;
        writeln!(f, "thp          {}", self.thp)?;
        writeln!(f, "cgroup       {}", self.cgroup)?;
        write!(f, "pagelab      {}", self.pagelab_version)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thp_mode_is_the_bracketed_word() {
        assert_eq!(bracketed("always [madvise] never\n"), Some("madvise"));
        assert_eq!(bracketed("never"), None);
    }

    #[test]
    fn cpuinfo_counts_cores_and_sockets() {
        let text = "processor: 0\nmodel name: Xeon X\nphysical id: 0\ncore id: 0\n\n\
                    processor: 1\nmodel name: Xeon X\nphysical id: 0\ncore id: 1\n\n\
                    processor: 2\nmodel name: Xeon X\nphysical id: 1\ncore id: 0\n\n\
                    processor: 3\nmodel name: Xeon X\nphysical id: 1\ncore id: 0\n";
        let (m, c, s) = parse_cpuinfo(text);
        assert_eq!(m.as_deref(), Some("Xeon X"));
        assert_eq!(c, Some(3));
        assert_eq!(s, Some(2));
    }

    #[test]
    fn detect_reads_this_machine() {
        let h = HostInfo::detect();
        assert!(h.cpus >= 1);
        assert!(h.mem_total > 0);
        assert!(!h.kernel.is_empty());
        assert!(h.to_string().contains("kernel"));
    }
}
