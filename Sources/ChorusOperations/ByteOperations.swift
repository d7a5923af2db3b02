import ChorusEvents
import ChorusNode
import ChorusProjections
import Foundation

/// A picture's image bytes (Specs/api.md §5). `GET /v1/pictures/{id}/bytes`;
/// `chorus picture get`. A picture this node does not hold is 404 `picture_unknown`.
public struct GetPictureBytes: Sendable {
    /// The picture.
    public let picture: PictureID

    /// The image of `picture`.
    public init(_ picture: PictureID) { self.picture = picture }

    /// The image and its media type (`application/octet-stream` when the picture names none).
    public func run(on node: Node) async throws -> (data: Data, mediaType: String) {
        let data: Data
        do {
            data = try await node.pictureData(picture)
        } catch NodeError.refused(.unknownPicture) {
            throw OperationError(.notFound, code: "picture_unknown", "this node holds no picture \(picture.hex); import its owner's events first")
        }
        let mime: String? = if case .live(let p) = try node.projections.picture(picture) { p.mime } else { nil }
        return (data, mime ?? "application/octet-stream")
    }
}

/// Every stored event, in arrival order, as an export file (Specs/events.md
/// §8). `GET /v1/export`; `chorus export`. Written page by page, so memory
/// stays bounded whatever the store.
public struct ExportEvents: Sendable {
    /// The file format.
    package let format: EventFileFormat

    /// An export in `format`.
    package init(format: EventFileFormat = .cbor) { self.format = format }

    /// What was written.
    public struct Summary: Sendable {
        /// Events written.
        public var events = 0
        /// Bytes written.
        public var bytes = 0
        /// Nothing written yet.
        public init() {}
    }

    /// Hands the file to `write` in pieces (one page of events each).
    @discardableResult
    public func run(on node: Node, write: ([UInt8]) async throws -> Void) async throws -> Summary {
        var summary = Summary()
        var since: UInt64 = 0
        while true {
            try Task.checkCancellation()
            let page = try node.arrivals(since: since, limit: 4096)
            guard let last = page.last else { break }
            var out: [UInt8] = []
            for stored in page { EventFile.append(stored, format: format, to: &out) }
            try await write(out)
            summary.bytes += out.count
            summary.events += page.count
            since = last.arrival
        }
        return summary
    }
}
