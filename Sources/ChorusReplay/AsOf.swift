import ChorusCrypto
import ChorusEvents
import ChorusLog
import Foundation

/// A point in a store's past.
public enum ReplayPoint: Hashable, Sendable, CustomStringConvertible {
    /// Events with an HLC at or before this one.
    case hlc(HLC)
    /// Events that arrived at or before this local arrival position.
    case arrival(UInt64)

    /// Parses `hlc:N`, `arrival:N`, an HLC as the tools print it
    /// (`2026-11-22T10:15:30.123Z+4`: that exact HLC), an ISO 8601 time
    /// (`2026-11-22T10:15:30Z`, fractions and offsets allowed: the whole
    /// millisecond), a date alone (`2026-11-22`: its first instant, UTC, as
    /// a balance "as of" a day is the one it opens with) or Unix
    /// milliseconds.
    public static func parse(_ text: String) throws -> ReplayPoint {
        if text.hasPrefix("hlc:"), let n = UInt64(text.dropFirst(4)) { return .hlc(HLC(rawValue: n)) }
        if text.hasPrefix("arrival:"), let n = UInt64(text.dropFirst(8)) { return .arrival(n) }
        if let ms = UInt64(text) { return .hlc(HLC(physicalMillis: ms, logical: UInt16.max)) }
        // The printed form: a UTC time, then `+` and the logical counter.
        if let plus = text.lastIndex(of: "+"), text[..<plus].hasSuffix("Z"), let logical = UInt16(text[text.index(after: plus)...]) {
            guard let ms = millis(String(text[..<plus])) else { throw ReplayError.badPoint(text) }
            return .hlc(HLC(physicalMillis: ms, logical: logical))
        }
        if let ms = millis(text) { return .hlc(HLC(physicalMillis: ms, logical: UInt16.max)) }
        throw ReplayError.badPoint(text)
    }

    /// Unix milliseconds of an ISO 8601 time, nil if it is none or before 1970.
    private static func millis(_ text: String) -> UInt64? {
        let iso = ISO8601DateFormatter()
        iso.formatOptions = [.withInternetDateTime, .withFractionalSeconds]
        let plain = ISO8601DateFormatter()
        let day = ISO8601DateFormatter()
        day.formatOptions = [.withFullDate]
        guard let date = iso.date(from: text) ?? plain.date(from: text) ?? day.date(from: text), date.timeIntervalSince1970 >= 0
        else { return nil }
        // To the microsecond first: 1.830 s is 1829.9999… ms as a Double.
        return UInt64((date.timeIntervalSince1970 * 1_000_000).rounded()) / 1000
    }

    public func includes(_ stored: StoredEvent) -> Bool {
        switch self {
        case .hlc(let h): stored.event.hlc <= h
        case .arrival(let n): stored.arrival <= n
        }
    }

    public var description: String {
        switch self {
        case .hlc(let h): "HLC \(h.rawValue) (\(h))"
        case .arrival(let n): "arrival position \(n)"
        }
    }
}

extension ReplayStore {
    /// The store as it was at `point`: a copy holding only the events up to
    /// it, with projections folded from them. A feed's events after the
    /// point are left out with everything after them, as the log needs.
    public func asOf(_ point: ReplayPoint, in directory: String) throws -> ReplayStore {
        var cut: Set<PublicKey> = []
        return try copy(to: directory) { stored in
            // Keep each feed a prefix: once one event of a feed is past the
            // point, so is the rest of it (HLCs increase along a feed).
            if cut.contains(stored.event.author) { return false }
            if point.includes(stored) { return true }
            cut.insert(stored.event.author)
            return false
        }
    }
}
