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

    /// Parses `hlc:N`, `arrival:N`, an ISO 8601 time (`2026-11-22T10:15:30Z`,
    /// fractions allowed) or Unix milliseconds.
    public static func parse(_ text: String) throws -> ReplayPoint {
        if text.hasPrefix("hlc:"), let n = UInt64(text.dropFirst(4)) { return .hlc(HLC(rawValue: n)) }
        if text.hasPrefix("arrival:"), let n = UInt64(text.dropFirst(8)) { return .arrival(n) }
        if let ms = UInt64(text) { return .hlc(HLC(physicalMillis: ms, logical: UInt16.max)) }
        let iso = ISO8601DateFormatter()
        iso.formatOptions = [.withInternetDateTime, .withFractionalSeconds]
        let plain = ISO8601DateFormatter()
        if let date = iso.date(from: text) ?? plain.date(from: text), date.timeIntervalSince1970 >= 0 {
            return .hlc(HLC(physicalMillis: UInt64(date.timeIntervalSince1970 * 1000), logical: UInt16.max))
        }
        throw ReplayError.badPoint(text)
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
