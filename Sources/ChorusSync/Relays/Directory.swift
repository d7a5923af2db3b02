import ChorusCrypto
import ChorusNode
import ChorusProjections

/// One directory exchange of a relay with another (Specs/sync.md §4.12).
package struct DirectoryExchange: Sendable {
    /// The relay exchanged with.
    package let relay: BootstrapRelay
    /// Its session's report, or why it failed.
    package let outcome: Result<SyncReport, any Error>
}

extension SyncNetwork {
    /// Exchanges the directory (every user key's bindings and relay list,
    /// Specs/sync.md §4.12) with each of the network's bootstrap relays
    /// other than `node` itself, one after another: what a relay does every
    /// `chorus serve --directory-interval`, so that any relay of a user's
    /// list can answer where everyone lives. `hostsListed` is the relay's
    /// `--host listed`: it keeps only the directory of feeds it does not host.
    /// One relay failing does not stop the others. `bootstrapRelays`
    /// replaces the network's list (a relay created before it was known).
    package static func exchangeDirectory(
        _ node: Node, hostsListed: Bool, bootstrapRelays: [BootstrapRelay]? = nil
    ) async -> [DirectoryExchange] {
        var out: [DirectoryExchange] = []
        for relay in bootstrapRelays ?? node.network.bootstrapRelays where relay.key != node.identity.device.raw {
            let outcome: Result<SyncReport, any Error>
            do {
                outcome = .success(
                    try await sync(node, relay: relay.address, key: relay.key, options: .directory(hostsListed: hostsListed)))
            } catch {
                outcome = .failure(error)
            }
            out.append(DirectoryExchange(relay: relay, outcome: outcome))
        }
        return out
    }
}
