<?php

declare(strict_types=1);

namespace Acme\Platform\Events;

/**
 * webhook.test: a test delivery to one endpoint (Client::testWebhook),
 * never in the feed, so it has no sequence; $endpointId is the endpoint
 * tested. Webhook::verify returns it, or the Event of a feed type.
 */
final class WebhookTest
{
    public const TYPE = 'webhook.test';

    /**
     * @param string               $id         evt_…, also the webhook-id
     * @param string               $timestamp  when it was sent, RFC 3339 UTC with milliseconds
     * @param string               $endpointId the endpoint tested
     * @param array<string, mixed> $data       the event's data as received
     */
    public function __construct(
        public readonly string $id,
        public readonly string $timestamp,
        public readonly string $endpointId,
        public readonly array $data,
    ) {
    }

    /** The type, as Event::$type. */
    public function type(): string
    {
        return self::TYPE;
    }
}
