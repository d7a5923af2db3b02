import ChorusBlobs
import ChorusCBOR
import ChorusCrypto
import ChorusEvents
import ChorusLog
import ChorusParallel
import ChorusStorage
import Foundation

// The rebuild's filing pass (Specs/projections.md §9.2): the log read
// once in arrival order, filed on all cores, written in key order.
extension Projections {
    /// The filing pass of a rebuild (Specs/projections.md §9.2): reads the
    /// log in arrival order, `sliceSize` events at a time, decodes and files
    /// each slice on all cores into sorted runs, and holds the runs until
    /// they fill `budget` bytes (or the log ends); then writes them, merged
    /// in key order, to the emptied `facts`, `index` and `state`. The first
    /// write is appended (`MDB_APPEND`: pages filled in order, never split):
    /// when the whole log's entries fit the budget (a million events take
    /// about 180 MB) every table is written that way, once. A later write's
    /// keys interleave with earlier ones and are put in key order. Returns
    /// every `message.sent`, which it files not as facts but as a list in
    /// the order of their `message` entries, for the message pass (152 bytes
    /// a send, held beside the budget). Once the list would pass
    /// `sendsBudget` bytes, every send is filed in `index` instead, under
    /// `IndexTable.rebuildSend`, with the other entries (§9.2): the list
    /// grows with the log, the budgets do not.
    func fileInBulk(
        sliceSize: Int, budget: Int = Projections.filingBudget, sendsBudget: Int = Projections.sendsBudget,
        payloadsBudget: Int = Projections.payloadsBudget, part: Int = 4_096, isCancelled: (() -> Bool)?,
        foldingFirst: (below: UInt8, fold: (FiledPayloads) throws -> Void)? = nil, progress: (_ filed: Int) -> Void
    ) throws -> (sends: BulkSends, payloads: FiledPayloads) {
        var filed = 0
        var payloads = FiledPayloads()
        var payloadsFull = false
        var writes = 0
        var sends: [BulkSend] = []
        var filedSends: Int? = nil
        // Only the runs are held: a slice's sends and payloads go into
        // lists of their own as it comes (a held slice kept them twice).
        var heldFacts: [SortedEntries] = []
        var heldIndex: [SortedEntries] = []
        var heldSends: [SortedEntries] = []
        var heldBytes = 0
        func writeHeld() throws {
            guard !heldFacts.isEmpty || !heldIndex.isEmpty || !heldSends.isEmpty else { return }
            try SortedEntries.writeMerged(heldFacts, to: facts, in: log.env, append: writes == 0)
            try SortedEntries.writeMerged(heldIndex + heldSends, to: index, in: log.env, append: writes == 0)
            writes += 1
            heldFacts.removeAll()
            heldIndex.removeAll()
            heldSends.removeAll()
            heldBytes = 0
        }
        /// Files `list` (sorted) as one run of `index` entries, held with the
        /// others, and empties it before the run is sorted.
        func fileSends(_ list: inout [BulkSend]) throws {
            guard !list.isEmpty else { return }
            var run = SortedEntries()
            for send in list { run.add(send.indexKey, send.indexValue) }
            let count = list.count
            list = []
            run.sort()
            if heldBytes + run.memoryBytes > budget { try writeHeld() }
            heldSends.append(run)
            heldBytes += run.memoryBytes
            filedSends = (filedSends ?? 0) + count
        }
        // The next two slices are read and filed on all cores while this one
        // is taken in or written (`pipelined`): two at once, because the
        // parts of one slice do not end together, and a core waiting for
        // the last part of its slice takes parts of the next.
        let last = try log.lastArrival()
        try pipelined(from: UInt64(0), ahead: 2) { since -> (plan: ClosedRange<UInt64>, next: UInt64?)? in
            guard since < last else { return nil }
            let end = min(last, since &+ UInt64(max(1, sliceSize)))
            return ((since + 1)...end, end < last ? end : nil)
        } build: { [self] arrivals in
            try filingSlice(arrivals, part: part)
        } consume: { slice in
            if isCancelled?() == true { throw CancellationError() }
            let bytes = (slice.facts + slice.index).reduce(0) { $0 + $1.memoryBytes }
            if heldBytes + bytes > budget { try writeHeld() }
            heldFacts += slice.facts
            heldIndex += slice.index
            heldBytes += bytes
            if filedSends != nil {
                var list = slice.sends.sorted()
                try fileSends(&list)
            } else if (sends.count + slice.sends.count) * MemoryLayout<BulkSend>.stride > sendsBudget {
                // The list, sorted, and its run are the largest allocations
                // of a rebuild: the held runs are written first, and the
                // list is sorted in place and freed once its run is built
                // (the slice's sends are a run of their own).
                try writeHeld()
                sends.sort()
                try fileSends(&sends)
                var list = slice.sends.sorted()
                try fileSends(&list)
            } else {
                sends += slice.sends
            }
            // Kept in arrival order up to the budget; the class pass reads
            // the payloads past it from the log.
            for run in slice.payloads where !payloadsFull {
                if payloads.memoryBytes + run.memoryBytes > payloadsBudget {
                    payloadsFull = true
                } else {
                    payloads.append(run)
                }
            }
            filed += slice.events
            progress(filed)
        }
        if let (below, fold) = foldingFirst {
            // The facts under `below` first; then the rest, and the index
            // entries, are written on another thread while `fold` folds
            // those, and the sends are sorted (§9.2).
            let append = writes == 0
            try SortedEntries.writeMerged(heldFacts, below: below, to: facts, in: log.env, append: append)
            let (factRuns, indexRuns) = (heldFacts, heldIndex + heldSends)
            heldFacts = []
            heldIndex = []
            heldSends = []
            let rest = Background { [self] in
                try SortedEntries.writeMerged(factRuns, from: below, to: facts, in: log.env, append: append)
                try SortedEntries.writeMerged(indexRuns, to: index, in: log.env, append: append)
            }
            defer { _ = try? rest.wait() }  // nothing writes after a rebuild returns or throws
            try fold(payloads)
            if filedSends == nil { sends.sort() }
            try rest.wait()
        } else {
            try writeHeld()
            // Each part's sends are in order already: the sort merges runs.
            if filedSends == nil { sends.sort() }
        }
        if let filedSends { return (.filed(count: filedSends), payloads) }
        return (.held(sends), payloads)
    }

    /// The bytes of sends a rebuild's filing lists in memory before it files
    /// them in `index` instead (§9.2): about 880,000 sends (152 bytes
    /// each), the messages of about 1.9 million events of a social workload.
    package static let sendsBudget = 128 << 20

    /// The bytes of payloads a rebuild's filing keeps for the fold of the
    /// classes (`FiledPayloads`, §9.2): those of about a million events of
    /// a social workload (the payloads of follows', likes' and blocks' adds
    /// and of messages' sends are not kept: their folds do not read them).
    package static let payloadsBudget = 32 << 20

    /// The sends a rebuild's filing listed for its message pass: in memory,
    /// or filed in `index` under `IndexTable.rebuildSend` (§9.2).
    enum BulkSends {
        case held([BulkSend])
        case filed(count: Int)

        var count: Int {
            switch self {
            case .held(let list): list.count
            case .filed(let count): count
            }
        }
    }

    /// The bytes of sorted runs a rebuild's filing pass holds before it
    /// writes them (§9.2): enough for about a million events' entries, well
    /// inside the 1 GiB a rebuild may take.
    package static let filingBudget = 256 << 20

    /// One slice of the log filed into sorted runs of `facts` and `index`
    /// entries (one run per part of the slice, in filing order), with how
    /// many events it held and its sends (§9.2).
    struct FilingSlice: Sendable {
        let facts: [SortedEntries]
        let index: [SortedEntries]
        let events: Int
        let sends: [BulkSend]
        /// The payloads the fold of the classes reads, one run per part.
        let payloads: [FiledPayloads]
    }

    /// A `message.sent` as a rebuild's message pass takes it: ordered as its
    /// `message` entry's key (chat, time, id), with where the log holds it,
    /// its sending device and what its fold reads of the payload, taken
    /// when the filing decoded it: the pass does not read the log again.
    struct BulkSend: Sendable, Comparable {
        let chat: ObjectID
        let hlc: UInt64
        let id: EventID
        let arrival: UInt64
        let author: PublicKey
        let content: SentContent

        static func < (a: BulkSend, b: BulkSend) -> Bool { (a.chat, a.hlc, a.id) < (b.chat, b.hlc, b.id) }

        /// Its `index` key when filed (§9.2): in the same order as `<`.
        var indexKey: [UInt8] { IndexTable.rebuildSend.key(chat, Codec.u64(hlc), id) }

        /// Its `index` value when filed (§9.2): u64be(arrival) ‖ author ‖
        /// u8(0: purged, 1: held, 2: held with a picture) ‖ that picture's
        /// blob when 2.
        var indexValue: [UInt8] {
            var out = Codec.u64(arrival) + author.bytes
            if let blob = content.attachment {
                out.append(2)
                out += blob.bytes
            } else {
                out.append(content.held ? 1 : 0)
            }
            return out
        }

        /// The send's fact as its message's fold takes it, without its
        /// payload (`content` says what the fold reads of it).
        var fact: Fact {
            Fact(order: MergeOrder(hlc: HLC(rawValue: hlc), author: author, id: id), kind: .messageSent, object: chat, arrival: arrival, payload: nil)
        }

        /// A send filed in `index`, read back.
        init(indexKey key: [UInt8], value: [UInt8]) throws {
            guard key.count == 73, value.count == 41 && value[40] < 2 || value.count == 73 && value[40] == 2 else {
                throw ProjectionError.corrupt("rebuild send entry of \(key.count) + \(value.count) bytes")
            }
            self.init(
                chat: try Codec.b32(key[1..<33], "chat"), hlc: Codec.readU64(key[33..<41]), id: try Codec.b32(key[41..<73], "message id"),
                arrival: Codec.readU64(value[0..<8]), author: try Codec.b32(value[8..<40], "sending device"),
                content: SentContent(attachment: value.count == 73 ? try Codec.b32(value[41..<73], "blob") : nil, held: value[40] != 0))
        }

        /// The send of `event`, held at `arrival`.
        init(_ event: Event, arrival: UInt64) {
            self.init(
                chat: event.object, hlc: event.hlc.rawValue, id: event.id, arrival: arrival, author: event.author,
                content: SentContent(payload: event.payload))
        }

        init(chat: ObjectID, hlc: UInt64, id: EventID, arrival: UInt64, author: PublicKey, content: SentContent) {
            self.chat = chat
            self.hlc = hlc
            self.id = id
            self.arrival = arrival
            self.author = author
            self.content = content
        }
    }

    /// The events at `arrivals`, decoded and filed on all cores. Each
    /// part reads its own range of arrivals in a read transaction of its
    /// own, and is filed and sorted on its own core, and kept as its own
    /// run: merging them is left to the write, which merges runs anyway, so
    /// nothing here runs on one core.
    func filingSlice(_ arrivals: ClosedRange<UInt64>, part: Int) throws -> FilingSlice {
        let (since, end) = (arrivals.lowerBound - 1, arrivals.upperBound)
        let span = Int(end - since)
        // Two parts per core balance the load when a core is busy elsewhere,
        // and keep the runs the write merges few.
        let parts = max(1, min(span / max(1, part), 2 * ProcessInfo.processInfo.activeProcessorCount))
        let partSpan = UInt64((span + parts - 1) / parts)
        let chunks = stride(from: since, to: end, by: Int(partSpan)).map { ($0 + 1)...min(end, $0 + partSpan) }
        let filedChunks = parallelMap(chunks, chunk: 1) { range -> Result<(SortedRunSink, [BulkSend], FiledPayloads, Int), Error> in
            Result {
                var sink = SortedRunSink(factsDB: facts, indexDB: index)
                var none: FoldRun? = nil
                var sends: [BulkSend] = []
                var payloads = FiledPayloads()
                var count = 0
                try log.forEachTrusted(arrivals: range) { arrival, event in
                    let targets = try file(StoredEvent(event: event, arrival: arrival), into: &sink, run: &none)
                    if event.kind == .messageSent {
                        sends.append(BulkSend(event, arrival: arrival))
                    } else if targets.contains(where: { Self.bulkFoldReadsPayload($0.0, event.kind) }) {
                        payloads.add(arrival, event.payloadBytes)
                    }
                    count += 1
                }
                sink.facts.sort()
                sink.index.sort()
                sends.sort()
                return (sink, sends, payloads, count)
            }
        }
        var sinks: [SortedRunSink] = []
        var sends: [BulkSend] = []
        var payloads: [FiledPayloads] = []
        var events = 0
        for chunk in filedChunks {
            let (filedSink, filedSends, filedPayloads, filedEvents) = try chunk.get()
            sinks.append(filedSink)
            sends += filedSends
            payloads.append(filedPayloads)
            events += filedEvents
        }
        return FilingSlice(facts: sinks.map(\.facts), index: sinks.map(\.index), events: events, sends: sends, payloads: payloads)
    }
}
