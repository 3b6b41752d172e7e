<?php

declare(strict_types=1);

namespace Acme\Platform\Tests;

use Acme\Platform\ApiError;
use Acme\Platform\Tests\Support\Env;
use Acme\Platform\Tests\Support\ServiceTestCase;

/**
 * Messages: post and list across pages.
 */
final class MessagesTest extends ServiceTestCase
{
    public function testPostAndListAcrossPages(): void
    {
        $client = Env::userClient();
        $conv = $client->createConversation(subject: 'messages', participants: [Env::get('OTHER_USER_ID')]);
        $posted = [];
        for ($i = 0; $i < 5; $i++) {
            $posted[] = $client->postMessage($conv['id'], "message $i", ['n' => $i]);
        }
        foreach ($posted as $i => $message) {
            $this->assertSame($conv['id'], $message['conversationId']);
            $this->assertSame(Env::get('USER_ID'), $message['author']);
            $this->assertSame(["message $i", ['n' => $i]], [$message['body'], $message['metadata']]);
        }

        $pages = iterator_to_array($client->messagePages($conv['id'], limit: 2), false);
        $this->assertSame([2, 2, 1], array_map(static fn ($p) => count($p->items), $pages));
        $listed = array_column(array_merge(...array_map(static fn ($p) => $p->items, $pages)), 'id');
        $this->assertSame(array_reverse(array_column($posted, 'id')), $listed, 'newest first, each once');
        // The other participant reads them too, through the generator.
        $bodies = array_column(iterator_to_array(Env::userClient('OTHER_')->messages($conv['id']), false), 'body');
        $this->assertSame(['message 4', 'message 3', 'message 2', 'message 1', 'message 0'], $bodies);

        // Posting raised the conversation: lastMessageAt is the last message's time.
        $again = $client->getConversation($conv['id']);
        $this->assertNotNull($again['lastMessageAt']);
        $this->assertSame(Env::micros(end($posted)['createdAt']), Env::micros($again['lastMessageAt']));
    }

    public function testTheSameKeyPostsOnce(): void
    {
        $client = Env::userClient();
        $conv = $client->createConversation(subject: 'idempotent message');
        $key = bin2hex(random_bytes(16));
        $first = $client->postMessage($conv['id'], 'once', idempotencyKey: $key);
        $second = $client->postMessage($conv['id'], 'once', idempotencyKey: $key);
        $this->assertSame($first['id'], $second['id']);
        $this->assertSame([$first['id']], array_column(iterator_to_array($client->messages($conv['id']), false), 'id'));
    }

    public function testAClosedConversationTakesNoMessage(): void
    {
        $client = Env::userClient();
        $conv = $client->createConversation(subject: 'closed', status: 'closed');
        try {
            $client->postMessage($conv['id'], 'too late');
            $this->fail('no ApiError');
        } catch (ApiError $e) {
            $this->assertSame([409, ApiError::CONVERSATION_CLOSED], [$e->status, $e->code()]);
        }
    }
}
