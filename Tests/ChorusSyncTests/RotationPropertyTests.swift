import ChorusCrypto
import ChorusEvents
import ChorusNode
import ChorusProjections
import ChorusSync
import ChorusTestSupport
import Foundation
import Testing

/// Concurrent adds, removals, sends and a late device binding by several
/// admins under partitions, from seeded schedules (replay a failure with its
/// seed): every replica converges, every member device reads every message
/// it is entitled to, and no removed member reads what was sent by a device
/// that had seen its removal (Specs/encryption.md §6).
@Suite("Chat key rotation under concurrency (seeded)", .closingNodes)
struct RotationPropertyTests {
    struct Sent {
        let id: MessageID
        /// Users the sender's device knew as removed from the chat when it
        /// sent, with the end of their last membership as it knew it.
        let removedInSendersView: [UserID: HLC]
        /// Whether the sender's device knew u2's second device as removed.
        let sawDeviceRemoval: Bool
    }

    @Test("converges and keeps entitlement and removal security", arguments: Array(UInt64(1)...24))
    func schedule(seed: UInt64) async throws {
        var rng = SplitMix64(seed: seed)
        let dir = SyncTempDir()
        defer { dir.cleanup() }
        let net = testNetwork()
        var nodes: [Node] = []
        for i in 0..<4 { nodes.append(try await makeNode(dir, "u\(i)", network: net)) }
        let users = nodes.map(\.identity.user)
        // Everyone knows everyone's keys before the chat starts.
        for _ in 0..<2 { for i in 1..<nodes.count { try await syncPair(nodes[0], nodes[i]) } }
        let chat = try await nodes[0].createChat(title: "seed \(seed)", members: [users[1], users[2]]).object
        _ = try await nodes[0].addChatMember(chat, users[1], admin: true)
        for i in 1..<nodes.count { try await syncPair(nodes[0], nodes[i]) }

        var sent: [Sent] = []
        var lateDevice: Node? = nil
        // u2's second device, bound early and removed later by u2.
        var doomed: Node? = nil
        var doomedRemoved = false
        func pick<T>(_ list: [T]) -> T { list[Int(rng.next() % UInt64(list.count))] }
        for step in 0..<90 {
            let roll = rng.next() % 100
            let actor = pick(Array(nodes.indices))
            let node = nodes[actor]
            let view = try node.projections.chatView(chat)
            let members = Set(view?.members.map(\.user) ?? [])
            let isAdmin = view?.members.contains { $0.user == node.identity.user && $0.admin } ?? false
            if roll < 45 {
                guard members.contains(node.identity.user) else { continue }
                var removed: [UserID: HLC] = [:]
                for u in users where !members.contains(u) {
                    if let end = try node.projections.membership(of: u.raw, in: chat.raw)?.intervals.last?.to { removed[u] = end }
                }
                let sawDeviceRemoval = try doomed.map { try node.projections.binding(of: $0.identity.device.raw)?.removedHLC != nil } ?? false
                let id = try await node.sendMessage(chat, text: "s\(seed) step \(step) from \(actor)").object
                sent.append(Sent(id: id, removedInSendersView: removed, sawDeviceRemoval: sawDeviceRemoval))
            } else if roll < 58, isAdmin {
                let candidates = users.filter { !members.contains($0) }
                guard !candidates.isEmpty else { continue }
                try await node.addChatMember(chat, pick(candidates), admin: rng.next() % 2 == 0)
            } else if roll < 68, isAdmin {
                // u0 stays: some member must hold every epoch to the end.
                let candidates = users.filter { members.contains($0) && $0 != node.identity.user && $0 != users[0] }
                guard !candidates.isEmpty else { continue }
                try await node.removeChatMember(chat, pick(candidates))
            } else if roll < 75, doomed == nil, step > 3 {
                let second = try await bindNewDevice(dir, "u2-second", of: nodes[2], network: net)
                doomed = second
                nodes.append(second)
            } else if roll < 78, let d = doomed, !doomedRemoved, step > 40 {
                try await nodes[2].removeDevice(d.identity.device)
                doomedRemoved = true
            } else if roll < 72, lateDevice == nil, step > 10 {
                // u1 binds a tablet mid-way; it syncs only with other users' nodes.
                let tablet = try await bindNewDevice(dir, "u1-tablet", of: nodes[1], network: net)
                lateDevice = tablet
                nodes.append(tablet)
            } else {
                // A partition: syncs happen only inside {0,1} or {2,3,...} in odd phases.
                let phase = (step / 9) % 2
                var a = actor, b = pick(Array(nodes.indices))
                if phase == 1 {
                    let group = a < 2 ? [0, 1] : Array(2..<nodes.count)
                    b = pick(group)
                    a = group.contains(a) ? a : group[0]
                }
                if a != b { try await syncPair(nodes[a], nodes[b]) }
            }
        }
        // Heal: rounds of syncs through every node until nothing changes.
        for _ in 0..<4 {
            for i in 1..<nodes.count {
                try await syncPair(nodes[i], nodes[(i + 1) % nodes.count == 0 ? 0 : (i + 1) % nodes.count])
                try await syncPair(nodes[0], nodes[i])
            }
        }
        // A removed device reads nothing sent by a device that knew of its removal.
        var deviceRemovalChecks = 0
        if let d = doomed, doomedRemoved {
            for s in sent where s.sawDeviceRemoval {
                deviceRemovalChecks += 1
                #expect(try readText(d, s.id) == nil, "seed \(seed): removed device reads \(s.id.short)")
            }
        }
        let digests = try Set(nodes.map { try digest($0) })
        #expect(digests.count == 1, "seed \(seed): replicas differ")

        let final = nodes[0].projections
        let effective = Set(try allMessages(nodes[0], chat).map(\.id))
        var entitledChecks = 0, removalChecks = 0
        for node in nodes {
            let user = node.identity.user
            guard let membership = try final.membership(of: user.raw, in: chat.raw) else { continue }
            let deviceRemoved = try final.binding(of: node.identity.device.raw)?.removedHLC != nil
            let joined = membership.intervals.last?.from
            for s in sent where effective.contains(s.id) {
                guard let m = try final.message(s.id) else { continue }
                let readable = try readText(node, s.id) != nil
                if membership.isCurrent, !deviceRemoved, let joined, m.hlc >= joined {
                    entitledChecks += 1
                    #expect(readable, "seed \(seed): member device \(node.identity.device.short) cannot read \(s.id.short)")
                }
                // Removed before the message in the final view and never back
                // (a concurrent re-add makes the member entitled again).
                // The sender must have seen the removal that ended the last
                // membership (not an earlier one, with a re-add it had not seen).
                let goneForGood = membership.intervals.allSatisfy { $0.to.map { $0 <= m.hlc } ?? false }
                if goneForGood, let seen = s.removedInSendersView[user], seen == membership.intervals.last?.to {
                    removalChecks += 1
                    #expect(!readable, "seed \(seed): removed \(user.short) reads \(s.id.short), sent after its removal")
                }
            }
        }
        // The counts show what a seed exercised (ids and keys are random, so
        // outcomes may differ slightly between runs of one seed).
        print("seed \(seed): \(sent.count) sent, \(effective.count) effective, \(try final.epochs(of: chat.raw).count) epochs, \(entitledChecks) entitled reads, \(removalChecks) removal checks, \(deviceRemovalChecks) device removal checks, tablet: \(lateDevice != nil)")
        #expect(entitledChecks > 0)
        for n in nodes { await n.close() }
    }
}
