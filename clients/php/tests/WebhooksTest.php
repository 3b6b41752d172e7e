<?php

declare(strict_types=1);

namespace Acme\Platform\Tests;

use Acme\Platform\ApiError;
use Acme\Platform\Events\MessageCreated;
use Acme\Platform\Events\WebhookTest;
use Acme\Platform\Tests\Support\Env;
use Acme\Platform\Tests\Support\ServiceTestCase;
use Acme\Platform\Webhook;
use Acme\Platform\WebhookVerificationError;

/**
 * Webhooks: Webhook::verify against the vectors the official Standard
 * Webhooks library signed (clients/testdata/webhook-vectors.json, checked
 * against the Go library by deploy/clientstest), and endpoint management
 * plus a live delivery from the real service to a receiver on loopback.
 */
final class WebhooksTest extends ServiceTestCase
{
    /** @return list<array<string, mixed>> */
    private static function vectors(): array
    {
        return json_decode((string) file_get_contents(__DIR__ . '/../../testdata/webhook-vectors.json'), true, 512, JSON_THROW_ON_ERROR);
    }

    public function testEveryVectorOfTheOfficialLibraryHasItsOutcome(): void
    {
        $vectors = self::vectors();
        $this->assertGreaterThanOrEqual(10, count($vectors));
        foreach ($vectors as $v) {
            try {
                $event = Webhook::verify($v['secrets'], $v['headers'], $v['body'], $v['now']);
                $this->assertSame('ok', $v['expect'], $v['name']);
                $this->assertSame($v['headers']['webhook-id'], $event->id, $v['name']);
            } catch (WebhookVerificationError $e) {
                $this->assertSame($v['expect'], $e->reason, $v['name'] . ': ' . $e->getMessage());
            }
        }
        $v = $vectors[0];
        $event = Webhook::verify($v['secrets'][0], array_change_key_case($v['headers'], CASE_UPPER), $v['body'], $v['now']);
        // The feed's typed events: the class of its type.
        $this->assertInstanceOf(MessageCreated::class, $event);
        $this->assertSame('héllo', $event->message()['body']);
        $this->assertSame(7, $event->sequence);
    }

    /**
     * One request to the receiver socket, answered 204.
     *
     * @param resource $server
     * @return array{0: array<string, string>, 1: string}
     */
    private static function receive($server): array
    {
        // Only a hang reaches this bound: delivery runs in the service's
        // background, which a loaded machine may slow for any time.
        $conn = stream_socket_accept($server, 300);
        if ($conn === false) {
            throw new \RuntimeException('no delivery arrived');
        }
        $head = '';
        while (!str_contains($head, "\r\n\r\n") && !feof($conn)) {
            $head .= (string) fgets($conn);
        }
        $headers = [];
        foreach (array_slice(explode("\r\n", trim($head)), 1) as $line) {
            [$k, $val] = array_map('trim', explode(':', $line, 2)) + [1 => ''];
            $headers[strtolower($k)] = $val;
        }
        $body = '';
        $length = (int) ($headers['content-length'] ?? 0);
        while (strlen($body) < $length && !feof($conn)) {
            $body .= (string) fread($conn, $length - strlen($body));
        }
        fwrite($conn, "HTTP/1.1 204 No Content\r\nConnection: close\r\n\r\n");
        fclose($conn);
        return [$headers, $body];
    }

    public function testManagementAndALiveDeliveryUnderBothSecretsOfARotation(): void
    {
        $server = stream_socket_server('tcp://127.0.0.1:0', $errno, $errstr);
        $this->assertNotFalse($server, $errstr);
        $url = 'http://' . stream_socket_get_name($server, false) . '/hook';
        $client = Env::serviceClient($this->logger);

        $created = $client->createWebhook($url, description: 'php suite');
        $this->extraSecrets[] = $created['secret'];
        $this->assertMatchesRegularExpression('/^whsec_[A-Za-z0-9+\/]{43}=$/', $created['secret']);
        $this->assertArrayNotHasKey('secret', $client->getWebhook($created['id']));
        $this->assertContains($created['id'], array_column(iterator_to_array($client->webhooks(1), false), 'id'));
        $this->assertSame('renamed', $client->updateWebhook($created['id'], ['description' => 'renamed'])['description']);

        $delivery = $client->testWebhook($created['id']);
        $this->assertSame('pending', $delivery['state']);
        [$headers, $body] = self::receive($server);
        $event = Webhook::verify([$created['secret']], $headers, $body);
        $this->assertInstanceOf(WebhookTest::class, $event);
        $this->assertSame(['webhook.test', $created['id']], [$event->type(), $event->endpointId]);

        $rotated = $client->rotateWebhookSecret($created['id'], 3600);
        $this->extraSecrets[] = $rotated;
        $client->testWebhook($created['id']);
        [$headers, $body] = self::receive($server);
        $this->assertCount(2, explode(' ', $headers['webhook-signature']));
        foreach ([$created['secret'], $rotated] as $secret) {
            Webhook::verify($secret, $headers, $body);
        }

        $this->assertCount(2, iterator_to_array($client->webhookDeliveries($created['id']), false));
        $client->retryWebhookDelivery($created['id'], $delivery['id']);
        [$headers] = self::receive($server);
        $this->assertSame($delivery['eventId'], $headers['webhook-id']);

        $client->deleteWebhook($created['id']);
        try {
            $client->getWebhook($created['id']);
            $this->fail('a deleted endpoint was found');
        } catch (ApiError $e) {
            $this->assertSame(ApiError::NOT_FOUND, $e->code());
        }
        try {
            $client->createWebhook('ftp://example.com/');
            $this->fail('an ftp URL was accepted');
        } catch (ApiError $e) {
            $this->assertSame(400, $e->status);
        }
        fclose($server);
    }
}
