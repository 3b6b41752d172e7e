<?php

declare(strict_types=1);

namespace Acme\Platform\Tests;

use Acme\Platform\ApiError;
use Acme\Platform\Tests\Support\Env;
use Acme\Platform\Tests\Support\ServiceTestCase;

/**
 * The mapping of the services' errors onto ApiError.
 */
final class ErrorsTest extends ServiceTestCase
{
    private function expectApiError(callable $call): ApiError
    {
        try {
            $call();
        } catch (ApiError $e) {
            return $e;
        }
        $this->fail('no ApiError');
    }

    public function test400CarriesTheFieldErrors(): void
    {
        $client = Env::userClient();
        $e = $this->expectApiError(fn () => $client->createConversation(
            subject: str_repeat('x', 301),
            participants: [Env::get('OTHER_USER_ID'), ''],
        ));
        $this->assertSame([400, ApiError::VALIDATION_FAILED], [$e->status, $e->code()]);
        $fields = array_map(static fn ($f) => $f->field, $e->fields);
        sort($fields);
        $this->assertSame(['participants[1]', 'subject'], $fields);
        $this->assertNotSame('', $e->field('subject')?->reason);
        $this->assertStringContainsString('participants[1]', $e->getMessage());
        $this->assertNull($e->retryAfter);
    }

    public function test400OfAQueryParameter(): void
    {
        $client = Env::userClient();
        $e = $this->expectApiError(fn () => $client->conversations(limit: 0)->current());
        $this->assertSame([400, ApiError::VALIDATION_FAILED], [$e->status, $e->code()]);
        $this->assertSame(['limit'], array_map(static fn ($f) => $f->field, $e->fields));
    }

    public function test401WrongCredentials(): void
    {
        $wrong = 'not-' . Env::get('OTHER_PASSWORD');
        $e = $this->expectApiError(fn () => Env::userClient('OTHER_', password: $wrong)->listDefinitions());
        $this->assertSame([401, ApiError::INVALID_CREDENTIALS], [$e->status, $e->code()]);
        $this->assertNotSame('', $e->requestId);
        $this->assertStringNotContainsString($wrong, (string) $e);
    }

    public function test404UnknownAndForeignConversations(): void
    {
        $client = Env::userClient();
        $e = $this->expectApiError(fn () => $client->getConversation('cnv_does_not_exist'));
        $this->assertSame([404, ApiError::NOT_FOUND], [$e->status, $e->code()]);
        $this->assertSame('/v1/conversations/cnv_does_not_exist', $e->path);

        // A conversation of the account in which the caller takes no part
        // does not exist for them.
        $theirs = Env::userClient('OTHER_')->createConversation(subject: 'not yours');
        $e = $this->expectApiError(fn () => $client->getConversation($theirs['id']));
        $this->assertSame(404, $e->status);
    }

    public function test429CarriesRetryAfter(): void
    {
        $statuses = [];
        $locked = null;
        for ($i = 0; $i < 10 && $locked === null; $i++) {
            $e = $this->expectApiError(
                fn () => Env::userClient('LOCKOUT_', password: 'wrong-' . hrtime(true))->login()
            );
            $statuses[] = $e->status;
            if ($e->status === 429) {
                $locked = $e;
            }
        }
        $this->assertNotNull($locked, 'no 429 after ' . implode(',', $statuses));
        $this->assertSame(array_fill(0, count($statuses) - 1, 401), array_slice($statuses, 0, -1));
        $this->assertSame(ApiError::TOO_MANY_REQUESTS, $locked->code());
        $this->assertGreaterThan(0, $locked->retryAfter);
        $this->assertStringContainsString('retry after', $locked->getMessage());
        // The lock holds for the right password too; the client raises at once.
        $e = $this->expectApiError(fn () => Env::userClient('LOCKOUT_')->login());
        $this->assertSame(429, $e->status);
    }
}
