import ChorusCrypto
import ChorusEvents
import ChorusProjections

// The library's reads: what the projections hold, through the node, which is
// the store's one boundary (the projections themselves are not public). Each
// read answers from one read transaction of its own, or from `read`'s, and
// runs on the caller's thread, concurrently with the writer and other reads
// (Specs/storage.md §6).
extension Node {
    /// Runs `body`, in which every read of this node on this thread answers
    /// from one read transaction: what `body` reads is one state of the
    /// store, whatever commits meanwhile. For a screen made of several
    /// reads, a picture with its likes:
    ///
    ///     let (picture, likes) = try node.read { (try node.picture(id), try node.likes(of: id)) }
    ///
    /// `readableChatPage` and `chatList` read this way. Keep `body` short: it
    /// holds a snapshot the store cannot reclaim pages of until it returns.
    public nonisolated func read<T>(_ body: () throws -> T) throws -> T { try log.env.readAsOneSnapshot(body) }

    // MARK: Profiles and devices

    /// `user`'s profile: fields in name order, the avatar resolved (only the
    /// user's own picture shows) and devices. Empty when nothing is held.
    public nonisolated func profile(of user: UserID) throws -> ProfileView { try projections.profile(user) }

    /// Every device ever bound to `user`, removed ones included, oldest
    /// binding first, each with its rights.
    public nonisolated func devices(of user: UserID) throws -> [DeviceView] { try projections.devices(of: user) }

    /// `user`'s relay list (Specs/projections.md §6.12): nil when the user
    /// has published none that took effect.
    public nonisolated func relays(of user: UserID) throws -> RelayListView? { try projections.relays(of: user) }

    // MARK: Coins and slots

    /// A user's balance: the rights of every device bound to them (removed
    /// devices included) plus any held by the user key itself.
    public nonisolated func balance(of user: UserID) throws -> BalanceView { try projections.balance(of: user) }

    /// The spending rights of one device.
    public nonisolated func rights(of device: DeviceID) throws -> UInt64 { try projections.rights(of: device) }

    /// Every lock slot of `user`'s profile, in slot number order. A locked
    /// slot shows no picture even when one was set.
    public nonisolated func slots(of user: UserID) throws -> [SlotView] { try projections.slots(of: user) }

    // MARK: Pictures

    /// A picture by id: live, deleted or unknown.
    public nonisolated func picture(_ id: PictureID) throws -> PictureLookup { try projections.picture(id) }

    /// A user's gallery in its user-defined order.
    public nonisolated func pictures(of user: UserID, limit: Int = .max, offset: Int = 0) throws -> [PictureView] {
        try projections.pictures(of: user, limit: limit, offset: offset)
    }

    /// Pictures of the users `viewer` (this node's user when nil) follows,
    /// newest first, leaving out users the viewer blocked. `before` is the
    /// HLC of the last picture of the previous page.
    public nonisolated func feed(for viewer: UserID? = nil, limit: Int = 50, before: HLC? = nil) throws -> [PictureView] {
        try projections.feed(for: viewer ?? identity.user, limit: limit, before: before)
    }

    // MARK: Relationships

    /// Users following `user`, leaving out those `user` blocked, in key
    /// order: all of them, or a page of up to `limit` users after `after`
    /// (the last user of the page before).
    public nonisolated func followers(of user: UserID, after: UserID? = nil, limit: Int? = nil) throws -> [UserID] {
        if after == nil, limit == nil { return try projections.followers(of: user) }
        return try projections.followers(of: user, after: after, limit: limit ?? .max)
    }

    /// Users `user` follows now, in key order: all of them, or a page of up
    /// to `limit` users after `after`.
    public nonisolated func following(of user: UserID, after: UserID? = nil, limit: Int? = nil) throws -> [UserID] {
        if after == nil, limit == nil { return try projections.following(of: user) }
        return try projections.following(of: user, after: after, limit: limit ?? .max)
    }

    /// Users `user` blocks now, in key order.
    public nonisolated func blocked(by user: UserID) throws -> [UserID] { try projections.blocked(by: user) }

    /// Users who like a picture or message, in key order (empty once a
    /// picture is deleted): all of them, or a page of up to `limit` users
    /// after `after`.
    public nonisolated func likes<Object: Likeable>(of object: Object, after: UserID? = nil, limit: Int? = nil) throws -> [UserID] {
        if after == nil, limit == nil { return try projections.likes(of: object) }
        return try projections.likes(of: object, after: after, limit: limit ?? .max)
    }

    // MARK: Chats (sealed; `readableChat`, `readableChatPage` and `chatList` open them)

    /// Chats `user` is a member of now, in creation order: all of them, or
    /// a page of up to `limit` chats after the chat `after`.
    public nonisolated func chats(of user: UserID, after: ChatID? = nil, limit: Int? = nil) throws -> [ChatView] {
        if after == nil, limit == nil { return try projections.chats(of: user) }
        return try projections.chats(of: user, after: after, limit: limit ?? .max)
    }

    /// A chat's record and current members, nil when this node holds no creation.
    public nonisolated func chat(_ id: ChatID) throws -> ChatView? { try projections.chatView(id) }

    /// A message that took effect here, nil otherwise.
    public nonisolated func message(_ id: MessageID) throws -> MessageView? { try projections.message(id) }

    // MARK: Effects and the whole state

    /// Why the stored event `id` takes no effect now, or nil when it takes
    /// effect (or is not held): an event that took no effect when it was
    /// committed can take effect later, when an event it depends on arrives.
    public nonisolated func noEffect(_ id: EventID) throws -> NoEffect? { try projections.noEffect(id) }

    /// BLAKE2b-256 of the network configuration and the whole projected
    /// state (Specs/projections.md §8): two nodes that hold the same events
    /// have the same digest, whatever the order they received them in.
    public nonisolated func digest() throws -> Hash32 { try projections.digest() }
}
