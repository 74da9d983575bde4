import NIOCore

/// Item ids of a command-2 frame.
public enum NotificationItemID {
    public static let deviceToken: UInt8 = 1
    public static let payload: UInt8 = 2
    public static let identifier: UInt8 = 3
    public static let expiration: UInt8 = 4
    public static let priority: UInt8 = 5
}
