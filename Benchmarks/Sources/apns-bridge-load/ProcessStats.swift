import Foundation

/// CPU time and memory of a process, from `/proc` (no hardware counters needed).
struct ProcessStats {
    let pid: Int32

    private static let ticksPerSecond = Double(sysconf(Int32(_SC_CLK_TCK)))

    /// User + system CPU seconds so far.
    var cpuSeconds: Double {
        guard let stat = try? String(contentsOfFile: "/proc/\(self.pid)/stat", encoding: .utf8),
            let close = stat.lastIndex(of: ")")
        else { return 0 }
        // Fields after the command name; utime and stime are fields 14 and 15 (1-based).
        let fields = stat[stat.index(after: close)...].split(separator: " ")
        guard fields.count > 13, let user = Double(fields[11]), let system = Double(fields[12]) else { return 0 }
        return (user + system) / Self.ticksPerSecond
    }

    /// Kilobytes of `/proc/PID/status`: `VmRSS` now, `VmHWM` the peak.
    func kilobytes(_ field: String) -> Int {
        guard let status = try? String(contentsOfFile: "/proc/\(self.pid)/status", encoding: .utf8) else { return 0 }
        for line in status.split(separator: "\n") where line.hasPrefix(field + ":") {
            return Int(line.split(separator: " ", omittingEmptySubsequences: true)[1]) ?? 0
        }
        return 0
    }

    var residentKilobytes: Int { self.kilobytes("VmRSS") }
    var peakResidentKilobytes: Int { self.kilobytes("VmHWM") }

    static var current: ProcessStats { ProcessStats(pid: getpid()) }
}

/// User + system CPU seconds of this process's children that have ended and been waited for
/// (`getrusage(RUSAGE_CHILDREN)`): the difference around one child's run is that child's CPU,
/// counted by the kernel over its whole life, warm-up included.
func endedChildrenCPUSeconds() -> Double {
    var usage = rusage()
    getrusage(RUSAGE_CHILDREN.rawValue, &usage)
    func seconds(_ time: timeval) -> Double { Double(time.tv_sec) + Double(time.tv_usec) / 1e6 }
    return seconds(usage.ru_utime) + seconds(usage.ru_stime)
}

/// Raises this process's open-file limit to its hard limit (children inherit it): 10,000 idle
/// connections need more than the usual 1,024 descriptors on each side.
func raiseOpenFileLimit() -> Int {
    var limit = rlimit()
    getrlimit(Int32(RLIMIT_NOFILE.rawValue), &limit)
    limit.rlim_cur = limit.rlim_max
    setrlimit(Int32(RLIMIT_NOFILE.rawValue), &limit)
    getrlimit(Int32(RLIMIT_NOFILE.rawValue), &limit)
    return Int(limit.rlim_cur)
}
