import Foundation

/// A hybrid logical clock timestamp: milliseconds since the Unix epoch in the
/// high 48 bits and a logical counter in the low 16 (Specs/events.md §4).
/// Comparing the raw values compares (physical, logical) lexicographically.
public struct HLC: Hashable, Comparable, Sendable, CustomStringConvertible {
    /// The 64-bit value carried in header key 4: `physicalMillis << 16 | logical`.
    package let rawValue: UInt64

    /// Wraps a raw 64-bit value as carried in a header; nothing is checked.
    package init(rawValue: UInt64) { self.rawValue = rawValue }

    /// Builds a timestamp from Unix milliseconds and a logical counter. `physicalMillis`
    /// must fit in 48 bits (`maxPhysicalMillis`): higher bits are lost.
    package init(physicalMillis: UInt64, logical: UInt16) {
        self.rawValue = (physicalMillis << 16) | UInt64(logical)
    }

    /// The value 0: the clock of an empty store. It is never a valid event timestamp,
    /// which must be positive.
    package static let zero = HLC(rawValue: 0)
    /// The largest physical part, 2^48 − 1 ms; `HybridClock.tick(nowMillis:)` clamps
    /// the wall clock to it.
    package static let maxPhysicalMillis: UInt64 = (1 << 48) - 1

    /// The physical part: milliseconds since the Unix epoch (the high 48 bits).
    package var physicalMillis: UInt64 { rawValue >> 16 }

    /// The physical part as a `Date`, to show when something happened.
    public var date: Date { Date(timeIntervalSince1970: Double(physicalMillis) / 1000) }
    /// The logical counter (the low 16 bits): orders timestamps that share a millisecond
    /// and keeps a node's own timestamps increasing when its wall clock does not.
    package var logical: UInt16 { UInt16(truncatingIfNeeded: rawValue) }

    /// Orders by raw value, i.e. by (physical, logical).
    public static func < (a: HLC, b: HLC) -> Bool { a.rawValue < b.rawValue }

    /// `2026-11-22T10:15:30.123Z+4` (the logical counter after the plus sign).
    public var description: String {
        "\(ISO8601Millis.format(physicalMillis))+\(logical)"
    }
}

/// The clock a node stamps its own events with. It never runs backwards:
/// it stays ahead of every timestamp the node has produced or accepted, so a
/// feed's timestamps strictly increase even if the wall clock steps back.
package struct HybridClock: Sendable {
    /// The latest timestamp the clock has produced or observed; every new tick is after it.
    package private(set) var last: HLC

    /// Starts the clock at `last`; a node passes the largest HLC in its store when it
    /// opens (Specs/events.md §4).
    package init(last: HLC = .zero) { self.last = last }

    /// The timestamp for a new local event.
    package mutating func tick(nowMillis: UInt64) -> HLC {
        let physical = min(nowMillis, HLC.maxPhysicalMillis)
        if physical > last.physicalMillis {
            last = HLC(physicalMillis: physical, logical: 0)
        } else if last.logical < UInt16.max {
            last = HLC(physicalMillis: last.physicalMillis, logical: last.logical + 1)
        } else {
            last = HLC(physicalMillis: last.physicalMillis + 1, logical: 0)
        }
        return last
    }

    /// Takes note of a timestamp from an accepted remote event.
    package mutating func observe(_ remote: HLC) {
        if remote > last { last = remote }
    }
}

enum ISO8601Millis {
    /// Formats Unix milliseconds as UTC `YYYY-MM-DDTHH:MM:SS.mmmZ` without Foundation.
    static func format(_ millis: UInt64) -> String {
        let ms = Int(millis % 1000)
        var secs = Int(millis / 1000)
        let sec = secs % 60; secs /= 60
        let min = secs % 60; secs /= 60
        let hour = secs % 24
        let (y, m, d) = civilFromDays(secs / 24)
        func pad(_ v: Int, _ width: Int) -> String {
            let s = String(v)
            return String(repeating: "0", count: max(0, width - s.count)) + s
        }
        return "\(pad(y, 4))-\(pad(m, 2))-\(pad(d, 2))T\(pad(hour, 2)):\(pad(min, 2)):\(pad(sec, 2)).\(pad(ms, 3))Z"
    }

    /// Howard Hinnant's days-to-civil algorithm.
    static func civilFromDays(_ days: Int) -> (Int, Int, Int) {
        let z = days + 719_468
        let era = (z >= 0 ? z : z - 146_096) / 146_097
        let doe = z - era * 146_097
        let yoe = (doe - doe / 1460 + doe / 36524 - doe / 146_096) / 365
        let y = yoe + era * 400
        let doy = doe - (365 * yoe + yoe / 4 - yoe / 100)
        let mp = (5 * doy + 2) / 153
        let d = doy - (153 * mp + 2) / 5 + 1
        let m = mp < 10 ? mp + 3 : mp - 9
        return (m <= 2 ? y + 1 : y, m, d)
    }
}

/// A timestamp is kept as its raw 64-bit value: exact, and ordered as the
/// clock orders it.
extension HLC: Codable {
    /// Reads the raw value.
    public init(from decoder: any Decoder) throws {
        self.init(rawValue: try decoder.singleValueContainer().decode(UInt64.self))
    }

    /// Writes the raw value.
    public func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        try container.encode(rawValue)
    }
}
