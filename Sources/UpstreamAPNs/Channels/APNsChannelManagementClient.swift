import CoreMetrics
import Foundation
import Logging
import NIOCore
import NIOPosix

/// Apple's channel management API for broadcast push: create, read, list and delete the Live
/// Activity channels of an app (`/1/apps/<bundle id>/channels` and `/all-channels`).
///
/// One ``APNsClient`` on the management endpoint does the HTTP/2 work, with a retry budget of
/// one request timeout: a refreshed authentication token, a stream APNs did not process, a quick 429
/// or 5xx, or a connection lost early are tried again within it; an attempt that timed out is
/// not. A create that got no answer may still have created a channel: the caller lists, then
/// decides.
public final class APNsChannelManagementClient: Sendable {
    private let client: APNsClient
    private let group: any EventLoopGroup
    private let idGenerator = APNsIDGenerator()

    public init(
        endpoint: APNsEndpoint,
        credentials: APNsCredentials,
        requestTimeout: TimeAmount = .seconds(10),
        group: any EventLoopGroup = MultiThreadedEventLoopGroup.singleton,
        logger: Logger = Logger(label: "apns-channels"),
        metricsFactory: any MetricsFactory = MetricsSystem.factory
    ) throws {
        var configuration = APNsClient.Configuration()
        configuration.connectionsPerPool = 1
        configuration.retryBudget = requestTimeout
        configuration.requestTimeout = requestTimeout
        configuration.connectTimeout = requestTimeout
        // 10,000 channel ids of about 30 characters each, as JSON.
        configuration.maximumResponseBodyLength = 1 << 20
        self.group = group
        self.client = try APNsClient(
            endpoint: endpoint,
            configuration: configuration,
            credentials: credentials,
            group: group,
            logger: logger,
            metricsFactory: metricsFactory
        )
    }

    /// Closes the connection.
    public func shutdown() {
        self.client.shutdown()
    }

    /// Creates a channel; returns its id (`201`, `apns-channel-id`).
    public func create(bundleID: String, messageStoragePolicy: APNsMessageStoragePolicy) async throws -> String {
        let body = ByteBuffer(
            string: "{\"message-storage-policy\":\(messageStoragePolicy.rawValue),\"push-type\":\"LiveActivity\"}"
        )
        let request = APNsRequest.channelManagement(
            method: "POST",
            path: Self.channelsPath(bundleID),
            channelID: nil,
            requestID: self.idGenerator.next(),
            body: body
        )
        let response = try await self.send(request)
        guard let channelID = response.channelID, !channelID.isEmpty else {
            throw APNsChannelManagementError(
                status: response.status,
                reason: nil,
                requestID: request.apnsID,
                detail: "the answer names no channel (no apns-channel-id)"
            )
        }
        return channelID
    }

    /// Reads one channel's settings (`200` with a JSON body).
    public func channel(_ channelID: String, bundleID: String) async throws -> APNsChannelInfo {
        let request = APNsRequest.channelManagement(
            method: "GET",
            path: Self.channelsPath(bundleID),
            channelID: channelID,
            requestID: self.idGenerator.next()
        )
        let response = try await self.send(request)
        let body = try self.decode(ChannelBody.self, from: response, request: request)
        return APNsChannelInfo(
            id: channelID,
            messageStoragePolicy: body.messageStoragePolicy.flatMap(APNsMessageStoragePolicy.init(rawValue:)),
            pushType: body.pushType
        )
    }

    /// Deletes a channel (`204`).
    public func delete(_ channelID: String, bundleID: String) async throws {
        let request = APNsRequest.channelManagement(
            method: "DELETE",
            path: Self.channelsPath(bundleID),
            channelID: channelID,
            requestID: self.idGenerator.next()
        )
        _ = try await self.send(request)
    }

    /// The ids of every channel of the app (`200` with `{"channels": [...]}`).
    public func channelIDs(bundleID: String) async throws -> [String] {
        let request = APNsRequest.channelManagement(
            method: "GET",
            path: "/1/apps/\(bundleID)/all-channels",
            channelID: nil,
            requestID: self.idGenerator.next()
        )
        let response = try await self.send(request)
        return try self.decode(ListBody.self, from: response, request: request).channels ?? []
    }

    // MARK: Private

    private struct ChannelBody: Decodable {
        var messageStoragePolicy: Int?
        var pushType: String?

        enum CodingKeys: String, CodingKey {
            case messageStoragePolicy = "message-storage-policy"
            case pushType = "push-type"
        }
    }

    private struct ListBody: Decodable {
        var channels: [String]?
    }

    private static func channelsPath(_ bundleID: String) -> String {
        "/1/apps/\(bundleID)/channels"
    }

    private func send(_ request: APNsRequest) async throws -> APNsResponse {
        switch try await self.client.send(request, on: self.group.any()).get() {
        case .answered(let response) where response.isSuccess:
            return response
        case .answered(let response):
            throw APNsChannelManagementError(
                status: response.status,
                reason: response.reason,
                requestID: request.apnsID,
                detail: ""
            )
        case .unanswered(let failure, let lastResponse):
            throw APNsChannelManagementError(
                status: lastResponse?.status,
                reason: lastResponse?.reason,
                requestID: request.apnsID,
                detail: "\(failure)"
            )
        }
    }

    private func decode<Body: Decodable>(
        _ type: Body.Type,
        from response: APNsResponse,
        request: APNsRequest
    ) throws -> Body {
        guard let body = response.body,
            let decoded = try? JSONDecoder().decode(Body.self, from: Data(body.readableBytesView))
        else {
            throw APNsChannelManagementError(
                status: response.status,
                reason: nil,
                requestID: request.apnsID,
                detail: "the answer's body is not the JSON Apple documents"
            )
        }
        return decoded
    }
}
