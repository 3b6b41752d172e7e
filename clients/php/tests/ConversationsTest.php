<?php

declare(strict_types=1);

namespace Acme\Platform\Tests;

use Acme\Platform\ApiError;
use Acme\Platform\Tests\Support\DropFirstResponses;
use Acme\Platform\Tests\Support\Env;
use Acme\Platform\Tests\Support\ServiceTestCase;

/**
 * Conversations: paging by Link, create, get, PATCH with ETags, idempotent
 * retries.
 */
final class ConversationsTest extends ServiceTestCase
{
    private static function unique(string $prefix): string
    {
        return $prefix . ' ' . bin2hex(random_bytes(6));
    }

    public function test25Conversations7APageNothingRepeatedOrSkipped(): void
    {
        $client = Env::userClient();
        $created = [];
        for ($i = 0; $i < 25; $i++) {
            $created[] = $client->createConversation(subject: "paging $i")['id'];
        }
        $this->assertCount(25, array_unique($created));

        $pages = iterator_to_array($client->conversationPages(limit: 7), false);
        $sizes = array_map(static fn ($p) => count($p->items), $pages);
        $listed = array_merge(...array_map(static fn ($p) => $p->items, $pages));
        $ids = array_column($listed, 'id');
        $this->assertSame(count($ids), count(array_unique($ids)), 'a conversation is repeated');
        $this->assertSame([], array_diff($created, $ids), 'a conversation is skipped');
        foreach (array_slice($sizes, 0, -1) as $size) {
            $this->assertSame(7, $size, implode(',', $sizes));
        }
        $this->assertGreaterThanOrEqual(1, end($sizes));
        $this->assertLessThanOrEqual(7, end($sizes));
        $this->assertNull(end($pages)->nextUrl);
        foreach (array_slice($pages, 0, -1) as $page) {
            $this->assertNotNull($page->nextUrl);
        }
        // Newest activity first: updatedAt, then id, descending.
        $keys = array_map(static fn ($c) => [Env::micros($c['updatedAt']), $c['id']], $listed);
        $sorted = $keys;
        usort($sorted, static fn ($a, $b) => $b <=> $a);
        $this->assertSame($sorted, $keys);
        // The generator yields the same conversations, in the same order.
        $this->assertSame($ids, array_column(iterator_to_array($client->conversations(limit: 7), false), 'id'));
    }

    public function testNewestFirst(): void
    {
        $client = Env::userClient();
        for ($i = 0; $i < 3; $i++) {
            $client->createConversation(subject: "newest $i");
        }
        $this->assertSame('newest 2', $client->conversations(limit: 1)->current()['subject']);
    }

    public function testCreateGetAndPatchWithEtag(): void
    {
        $client = Env::userClient();
        $subject = self::unique('create');
        $created = $client->createConversation(subject: $subject, participants: [Env::get('OTHER_USER_ID')]);
        $this->assertSame($subject, $created['subject']);
        $this->assertSame('open', $created['status']);
        $participants = $created['participants'];
        sort($participants);
        $expected = [Env::get('USER_ID'), Env::get('OTHER_USER_ID')];
        sort($expected);
        $this->assertSame($expected, $participants);
        $this->assertNotNull($client->etag($created['id']));

        $this->assertSame($created['id'], $client->getConversation($created['id'])['id']);
        $tag = $client->etag($created['id']);

        $patched = $client->updateConversation($created['id'], subject: "$subject (renamed)", status: 'snoozed');
        $this->assertSame(["$subject (renamed)", 'snoozed'], [$patched['subject'], $patched['status']]);
        $this->assertNotSame($tag, $client->etag($created['id']));
        $this->assertSame('snoozed', Env::userClient('OTHER_')->getConversation($created['id'])['status']);
    }

    public function testStaleEtagIs412(): void
    {
        $mine = Env::userClient();
        $theirs = Env::userClient('OTHER_');
        $conv = $mine->createConversation(
            subject: self::unique('edit race'),
            participants: [Env::get('OTHER_USER_ID')],
        );
        $mine->getConversation($conv['id']);
        $theirs->getConversation($conv['id']);
        $theirs->updateConversation($conv['id'], subject: 'theirs'); // moves the ETag on
        try {
            $mine->updateConversation($conv['id'], subject: 'mine');
            $this->fail('no ApiError');
        } catch (ApiError $e) {
            $this->assertSame([412, ApiError::PRECONDITION_FAILED], [$e->status, $e->code()]);
        }
        $this->assertSame('theirs', $mine->getConversation($conv['id'])['subject'], 'nothing was overwritten');
        // Having read it again, the edit goes through.
        $this->assertSame('mine', $mine->updateConversation($conv['id'], subject: 'mine')['subject']);
    }

    public function testAnUpdateAfterAMessageIsConditionalOnTheStateAfterIt(): void
    {
        $client = Env::userClient();
        $conv = $client->createConversation(subject: 'etag after a message ' . bin2hex(random_bytes(4)));
        $createdTag = $client->etag($conv['id']);
        $client->postMessage($conv['id'], "moves the conversation's ETag");
        $this->assertNotNull($client->etag($conv['id']));
        $this->assertNotSame($createdTag, $client->etag($conv['id']));
        // No 412: the client tracked the tag the message made.
        $updated = $client->updateConversation($conv['id'], subject: 'after the message');
        $this->assertSame('after the message', $updated['subject']);

        // And the update is still conditional: a change by someone else
        // after the message is a 412, not silently overwritten.
        $client->postMessage($conv['id'], 'another');
        Env::userClient()->updateConversation($conv['id'], status: 'snoozed');
        try {
            $client->updateConversation($conv['id'], subject: 'overwrites?');
            $this->fail('no 412');
        } catch (ApiError $e) {
            $this->assertSame([412, ApiError::PRECONDITION_FAILED], [$e->status, $e->code()]);
        }
        $this->assertSame('after the message', Env::userClient()->getConversation($conv['id'])['subject']);
    }

    public function testACreateWhoseAnswerIsLostIsRetriedAndCreatesOne(): void
    {
        $proxy = new DropFirstResponses(Env::get('CONVERSATIONS_URL'), 'POST', '/v1/conversations', 1);
        try {
            $client = Env::userClient(conversationsUrl: $proxy->url, logger: $this->logger);
            $subject = self::unique('retried');
            $created = $client->createConversation(subject: $subject);
            $posts = array_values(array_filter($proxy->forwarded(), static fn ($r) => $r['method'] === 'POST'));
        } finally {
            $proxy->close();
        }
        $this->assertCount(2, $posts, 'the create was sent twice');
        $this->assertSame([true, false], array_column($posts, 'dropped'));
        $this->assertSame($posts[0]['idempotencyKey'], $posts[1]['idempotencyKey'], 'the retry reused the key');
        $this->assertNotSame('', $posts[0]['idempotencyKey']);
        $this->assertSame(1, $this->logCount('connection closed without a response; retry 1'));

        $same = array_filter(
            iterator_to_array(Env::userClient()->conversations(limit: 100), false),
            static fn ($c) => $c['subject'] === $subject,
        );
        $this->assertSame([$created['id']], array_column($same, 'id'), 'one conversation was created');
    }

    public function testTheSameKeyTwiceReturnsTheFirstConversation(): void
    {
        $client = Env::userClient();
        $key = bin2hex(random_bytes(16));
        $subject = self::unique('same key');
        $first = $client->createConversation(subject: $subject, idempotencyKey: $key);
        $second = $client->createConversation(subject: $subject, idempotencyKey: $key);
        $this->assertSame($first['id'], $second['id']);
        try {
            $client->createConversation(subject: "$subject but different", idempotencyKey: $key);
            $this->fail('no ApiError');
        } catch (ApiError $e) {
            $this->assertSame([422, ApiError::IDEMPOTENCY_KEY_REUSED], [$e->status, $e->code()]);
        }
    }
}
