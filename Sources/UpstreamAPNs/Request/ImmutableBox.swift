/// A value shared by every copy of the struct that holds it: copying that struct is then one
/// retain, whatever strings and buffers the value holds. `APNsRequest` and `APNsResponse` keep
/// their fields in one, as each passes through five or six layers that keep a copy
/// (docs/performance-log.md, "Copies of a request and of its answer").
final class ImmutableBox<Value: Sendable>: Sendable {
    let value: Value

    init(_ value: Value) {
        self.value = value
    }
}
