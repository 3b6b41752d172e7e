<?php

declare(strict_types=1);

namespace Acme\Platform;

use Acme\Platform\Events\Event;
use Acme\Platform\Events\WebhookTest;

/**
 * Verifies webhook deliveries (Standard Webhooks v1).
 *
 *     $event = Webhook::verify([$secret], getallheaders(), file_get_contents('php://input'));
 *
 * The event is the feed's: an Event of the class of its type
 * (MessageCreated, ...), or a WebhookTest for a test delivery. Its id is
 * also the webhook-id, the same on every attempt: drop repeats of one you
 * handled. Deliveries may arrive out of order: order by sequence.
 */
final class Webhook
{
    /** How far a delivery's webhook-timestamp may be from the receiver's clock. */
    public const TOLERANCE_SECONDS = 300;

    /**
     * Checks the signature over webhook-id, webhook-timestamp and the raw
     * body under any of $secrets (several while a secret is rotated), in
     * constant time, and the timestamp within 5 minutes of $now, in
     * seconds since the epoch (default: the clock). Pass the body exactly
     * as received.
     *
     * @param string|list<string> $secrets
     * @param array<string, string|list<string>> $headers
     * @throws WebhookVerificationError
     */
    public static function verify(
        #[\SensitiveParameter] string|array $secrets,
        array $headers,
        string $rawBody,
        ?int $now = null,
    ): Event|WebhookTest {
        $id = self::header($headers, 'webhook-id');
        $ts = self::header($headers, 'webhook-timestamp');
        $signatures = self::header($headers, 'webhook-signature');
        if ($id === null || $ts === null || $signatures === null || $id === '' || $ts === '' || $signatures === '') {
            throw new WebhookVerificationError('headers', 'missing webhook-id, webhook-timestamp or webhook-signature');
        }
        if (!ctype_digit($ts)) {
            throw new WebhookVerificationError('headers', 'webhook-timestamp is not Unix seconds');
        }
        if (abs(($now ?? time()) - (int) $ts) > self::TOLERANCE_SECONDS) {
            throw new WebhookVerificationError('timestamp', 'webhook-timestamp is more than 5 minutes from now');
        }
        $signed = $id . '.' . $ts . '.' . $rawBody;
        $expected = [];
        foreach (is_string($secrets) ? [$secrets] : $secrets as $secret) {
            $key = base64_decode(str_starts_with($secret, 'whsec_') ? substr($secret, 6) : $secret, true);
            if ($key === false || $key === '') {
                throw new WebhookVerificationError('secret', 'a secret is not whsec_ and base64');
            }
            $expected[] = hash_hmac('sha256', $signed, $key, true);
        }
        $matched = false;
        foreach (explode(' ', $signatures) as $versioned) {
            $parts = explode(',', $versioned, 2);
            if (count($parts) !== 2 || $parts[0] !== 'v1') {
                continue;
            }
            $got = base64_decode($parts[1], true);
            if ($got === false) {
                continue;
            }
            foreach ($expected as $want) {
                if (hash_equals($want, $got)) { // every comparison runs
                    $matched = true;
                }
            }
        }
        if (!$matched) {
            throw new WebhookVerificationError('signature', 'no signature matches any of the secrets');
        }
        try {
            $event = json_decode($rawBody, true, 512, JSON_THROW_ON_ERROR);
        } catch (\JsonException) {
            throw new WebhookVerificationError('payload', 'the body is not JSON');
        }
        if (!is_array($event) || array_is_list($event) || !is_string($event['id'] ?? null) || !is_string($event['type'] ?? null)) {
            throw new WebhookVerificationError('payload', 'the body is not an event');
        }
        if ($event['id'] !== $id) {
            throw new WebhookVerificationError('payload', "the body's id is not the webhook-id");
        }
        if ($event['type'] === WebhookTest::TYPE) {
            $data = $event['data'] ?? null;
            if (!is_array($data) || !is_string($data['endpointId'] ?? null) || !is_string($event['timestamp'] ?? null)) {
                throw new WebhookVerificationError('payload', 'the body is not a webhook.test event');
            }
            return new WebhookTest($event['id'], $event['timestamp'], $data['endpointId'], $data);
        }
        try {
            return Event::fromArray($event);
        } catch (ClientException $e) {
            throw new WebhookVerificationError('payload', $e->getMessage());
        }
    }

    /** @param array<string, string|list<string>> $headers */
    private static function header(array $headers, string $name): ?string
    {
        foreach ($headers as $key => $value) {
            if (strtolower((string) $key) === $name) {
                return is_array($value) ? implode(', ', $value) : (string) $value;
            }
        }
        return null;
    }
}
