<?php

declare(strict_types=1);

namespace Acme\Platform\Tests;

use Acme\Platform\ApiError;
use Acme\Platform\Client;
use Acme\Platform\EventFeed;
use Acme\Platform\Events\ConversationCreated;
use Acme\Platform\Events\ConversationUpdated;
use Acme\Platform\Events\Event;
use Acme\Platform\Events\MessageCreated;
use Acme\Platform\Internal\SseParser;
use Acme\Platform\Tests\Support\DropFirstResponses;
use Acme\Platform\Tests\Support\Env;
use Acme\Platform\Tests\Support\ServiceTestCase;

/**
 * The event feed and the live stream against the real services: a
 * conversation created, given a message and closed is three events, in
 * order, through both; a stored position resumes the feed, and a stream
 * whose connection is cut (deploy/clientstest's fault proxy) resumes after
 * the last event it received, with nothing lost or repeated; a token the
 * service refuses at a reconnection is renewed once, not twice.
 */
final class EventsTest extends ServiceTestCase
{
    public function testTheSseParserReadsChunksOfAnySize(): void
    {
        $stream = ": a comment\r\nretry: 1500\r\n\r\n"
            . "id: 7\nevent: message.created\ndata: {\"sequence\":7,\ndata:  \"x\":1}\n\n"
            . "data:no space\rid: 8\r\r"
            . "id\nevent: ignored\n\n" // an id-only block: the last id is "", nothing dispatched
            . "retry: soon\nid: 9\0\ndata: kept id\n\n"
            . 'data: unfinished';
        $want = [
            ['id' => '7', 'event' => 'message.created', 'data' => "{\"sequence\":7,\n \"x\":1}"],
            ['id' => '8', 'event' => 'message', 'data' => 'no space'],
            ['id' => '', 'event' => 'message', 'data' => 'kept id'],
        ];
        // Whole, then one byte at a time (CRLF split across chunks too).
        foreach ([[$stream], str_split($stream)] as $chunks) {
            $parser = new SseParser('3');
            $got = array_merge(...array_map(static fn (string $c): array => $parser->push($c), $chunks));
            $this->assertSame($want, $got);
            $this->assertSame([1500, ''], [$parser->retry, $parser->lastEventId]);
        }
        $resumed = new SseParser('41');
        $this->assertSame([['id' => '41', 'event' => 'message', 'data' => 'a']], $resumed->push("data: a\n\n"));
    }

    public function testCreatePostCloseThroughTheFeedResumedFromAStoredPosition(): void
    {
        $client = Env::userClient();
        $start = self::currentPosition($client);
        $conv = $client->createConversation(subject: 'events through the feed');
        $message = $client->postMessage($conv['id'], 'an event');
        $client->updateConversation($conv['id'], status: 'closed');

        $feed = $client->events(after: $start, limit: 2);
        $events = self::eventsOf($feed, $conv['id'], 3);
        $this->assertLifecycle($events, $conv, $message);
        $this->assertGreaterThanOrEqual($events[2]->sequence, $feed->position());

        // A consumer that stored the position after the first event resumes right after it.
        $resumed = self::eventsOf($client->events(after: $events[0]->sequence), $conv['id'], 2);
        $this->assertSame([$events[1]->id, $events[2]->id], array_map(static fn (Event $e) => $e->id, $resumed));

        $page = $client->eventPage(after: $start, limit: 1000, types: [Event::MESSAGE_CREATED]);
        $mine = array_filter($page->items, static fn (Event $e) => $e->conversation['id'] === $conv['id']);
        $this->assertSame([$events[1]->id], array_values(array_map(static fn (Event $e) => $e->id, $mine)));
        foreach ($page->items as $e) {
            $this->assertInstanceOf(MessageCreated::class, $e);
        }
        $this->assertGreaterThanOrEqual($events[2]->sequence, $page->position);
    }

    public function testBadParametersAreA400(): void
    {
        $client = Env::userClient();
        foreach ([
            static fn () => $client->eventPage(types: ['conversation.deleted']),
            static fn () => $client->eventPage(limit: 1001),
            // The stream refuses them before it starts, with the same error.
            static fn () => $client->streamEvents(types: ['conversation.deleted'])->getIterator()->current(),
        ] as $call) {
            try {
                $call();
                $this->fail('no ApiError');
            } catch (ApiError $e) {
                $this->assertSame(400, $e->status);
            }
        }
        $this->expectException(\InvalidArgumentException::class);
        $client->events(after: -1);
    }

    public function testTheStreamResumesACutConnectionAfterTheLastEvent(): void
    {
        $client = Env::userClient();
        $start = self::currentPosition($client);
        // The first stream through this proxy is cut after its first event.
        $proxy = new DropFirstResponses(Env::get('CONVERSATIONS_URL'), 'GET', '/v1/events/stream', 1, 1);
        try {
            $stream = Env::userClient(conversationsUrl: $proxy->url)->streamEvents(after: $start);
            $conv = $client->createConversation(subject: 'events through the stream');
            $received = [];
            $onFirstConnection = 0; // events that came before the cut
            $mine = [];
            $message = null;
            foreach ($stream as $event) {
                $received[] = $event;
                $onFirstConnection += $stream->connections() === 1 ? 1 : 0;
                if ($event->conversation['id'] !== $conv['id']) {
                    continue;
                }
                $mine[] = $event;
                if (count($mine) === 1) {
                    // Live: the message and the close happen while the stream runs.
                    $message = $client->postMessage($conv['id'], 'a live event');
                    $client->updateConversation($conv['id'], status: 'closed');
                }
                if (count($mine) === 3) {
                    break;
                }
            }
            $this->assertNotNull($message);
            $this->assertLifecycle($mine, $conv, $message);

            $forwarded = $proxy->forwarded();
            $this->assertTrue($forwarded[0]['dropped']);
            $this->assertGreaterThanOrEqual(2, $stream->connections());
            $this->assertArrayNotHasKey('Last-Event-Id', $forwarded[0]['headers']);
            // Cut after its first event (or, on a machine slow enough, ended
            // by its token before any): resumed after the last event received.
            $this->assertLessThanOrEqual(1, $onFirstConnection);
            $resumedAfter = $onFirstConnection === 1 ? (string) $received[0]->sequence : null;
            $this->assertSame($resumedAfter, $forwarded[1]['headers']['Last-Event-Id'] ?? null);
            $this->assertSame($mine[2]->sequence, $stream->position());

            // No gap, no duplicate: the stream gave exactly what the feed has.
            $fromFeed = [];
            foreach ($client->events(after: $start) as $e) {
                if ($e->sequence > $mine[2]->sequence) {
                    break;
                }
                $fromFeed[] = $e->id;
            }
            $this->assertSame($fromFeed, array_map(static fn (Event $e) => $e->id, $received));
        } finally {
            $proxy->close();
        }
    }

    public function testTheStreamOutlivesItsTokenReconnectingWithAFreshOneAndLastEventId(): void
    {
        $client = Env::userClient();
        $start = self::currentPosition($client);
        // A proxy that cuts nothing (drop 0), to see the stream's requests;
        // the service refuses the token of the first reconnection (401
        // invalid_token, as it answers a token that expired): renewed once.
        $proxy = new DropFirstResponses(
            Env::get('CONVERSATIONS_URL'),
            'GET',
            '/v1/events/stream',
            0,
            1,
            refuseTokens: 1,
            refuseFrom: 1,
        );
        try {
            $stream = Env::userClient(conversationsUrl: $proxy->url)->streamEvents(after: $start);
            $conv = $client->createConversation(subject: "a stream across its token's expiry");
            // The service ends the stream when its token expires (a few
            // seconds here) and the loop connects again by itself; another
            // process posts the message once it has.
            $poster = proc_open(
                [PHP_BINARY, __DIR__ . '/Support/post_after_reconnect.php', $proxy->reportUrl(), $conv['id'], 'after'],
                [1 => ['pipe', 'w'], 2 => ['redirect', 1]],
                $pipes,
            );
            $this->assertIsResource($poster);
            $received = []; // an event and the connection it came on
            foreach ($stream as $event) {
                $received[] = [$event, $stream->connections()];
                if ($event instanceof MessageCreated && $event->message()['body'] === 'after') {
                    break;
                }
            }
            $output = (string) stream_get_contents($pipes[1]);
            fclose($pipes[1]);
            $this->assertSame(0, proc_close($poster), $output);

            $mine = array_values(array_filter(
                $received,
                static fn (array $r) => $r[0]->conversation['id'] === $conv['id'],
            ));
            $this->assertSame(
                [Event::CONVERSATION_CREATED, Event::MESSAGE_CREATED],
                array_map(static fn (array $r) => $r[0]->type, $mine),
            );
            // (A slow machine may see the third connection's token expire too.)
            $forwarded = array_slice($proxy->forwarded(), 0, 3);
            $this->assertSame([false, true, false], array_column($forwarded, 'tokenRefused'));
            [$first, $refused, $second] = array_column($forwarded, 'headers');
            $this->assertNotSame($first['Authorization'], $refused['Authorization'], 'a fresh token');
            $this->assertNotSame($refused['Authorization'], $second['Authorization'], 'the refused one renewed');
            $before = array_values(array_filter($received, static fn (array $r) => $r[1] === 1));
            $resumedAfter = $before === [] ? null : (string) end($before)[0]->sequence;
            $this->assertSame($resumedAfter, $refused['Last-Event-Id'] ?? null);
            $this->assertSame($resumedAfter, $second['Last-Event-Id'] ?? null);
        } finally {
            $proxy->close();
        }
    }

    public function testATokenRefusedAgainAfterItsRenewalThrowsWithoutAThirdTry(): void
    {
        $conversations = Env::get('CONVERSATIONS_URL');
        $proxy = new DropFirstResponses($conversations, 'GET', '/v1/events/stream', 0, 1, refuseTokens: 2);
        try {
            $stream = Env::userClient(conversationsUrl: $proxy->url)->streamEvents();
            try {
                foreach ($stream as $_) {
                    $this->fail('an event through refused tokens');
                }
                $this->fail('the stream ended without an error');
            } catch (ApiError $e) {
                $this->assertSame([401, ApiError::INVALID_TOKEN], [$e->status, $e->code()]);
            }
            $forwarded = $proxy->forwarded();
            $this->assertSame([true, true], array_column($forwarded, 'tokenRefused'));
            [$first, $second] = array_column($forwarded, 'headers');
            $this->assertNotSame($first['Authorization'], $second['Authorization'], 'renewed once');
        } finally {
            $proxy->close();
        }
    }

    /** The position after every event the client may see so far. */
    private static function currentPosition(Client $client): int
    {
        $feed = $client->events(limit: 1000);
        foreach ($feed as $_) {
        }
        return $feed->position() ?? 0;
    }

    /**
     * Reads $feed (again and again: each pass resumes where the last ended)
     * until it has given $count events of the conversation. Events reach the
     * feed shortly after their change (the relay), so the first passes may
     * come short.
     *
     * @return list<Event>
     */
    private static function eventsOf(EventFeed $feed, string $conversationId, int $count): array
    {
        $got = [];
        while (true) {
            foreach ($feed as $event) {
                if ($event->conversation['id'] === $conversationId) {
                    $got[] = $event;
                }
            }
            if (count($got) >= $count) {
                return $got;
            }
            usleep(50_000);
        }
    }

    /**
     * @param list<Event>          $events
     * @param array<string, mixed> $conv
     * @param array<string, mixed> $message
     */
    private function assertLifecycle(array $events, array $conv, array $message): void
    {
        $this->assertSame(
            [Event::CONVERSATION_CREATED, Event::MESSAGE_CREATED, Event::CONVERSATION_UPDATED],
            array_map(static fn (Event $e) => $e->type, $events),
        );
        foreach ($events as $i => $e) {
            $this->assertStringStartsWith('evt_', $e->id);
            $this->assertMatchesRegularExpression('/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d{1,3})?Z$/', $e->timestamp);
            if ($i > 0) {
                $this->assertGreaterThan($events[$i - 1]->sequence, $e->sequence);
            }
        }
        [$created, $posted, $updated] = $events;
        $this->assertInstanceOf(ConversationCreated::class, $created);
        $this->assertSame($conv['subject'], $created->conversation['subject']);
        $this->assertInstanceOf(MessageCreated::class, $posted);
        $this->assertSame($message, $posted->message());
        $this->assertInstanceOf(ConversationUpdated::class, $updated);
        $this->assertSame(['status' => 'open'], $updated->changes());
        $this->assertSame('closed', $updated->conversation['status']);
    }
}
