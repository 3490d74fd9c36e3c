//! Facts about this relay process that it reports (the relay tree's
//! `rss_bytes`) and limits itself by (the memory budget of writes).

/// Resident memory of this process, bytes (Linux `/proc/self/status`
/// `VmRSS`; 0 where the platform does not say).
pub(crate) fn resident_bytes() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            let line = s.lines().find(|l| l.starts_with("VmRSS:"))?;
            line.split_whitespace().nth(1)?.parse::<u64>().ok()
        })
        .map_or(0, |kib| kib * 1024)
}
