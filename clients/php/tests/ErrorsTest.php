<?php

declare(strict_types=1);

namespace Acme\Platform\Tests;

use Acme\Platform\ApiError;
use Acme\Platform\Client;
use Acme\Platform\Tests\Support\Env;
use Acme\Platform\Tests\Support\ServiceTestCase;

/**
 * The mapping of the services' errors onto ApiError.
 */
final class ErrorsTest extends ServiceTestCase
{
    public function test400CarriesTheFieldErrors(): void
    {
        $client = Env::userClient();
        $e = self::apiError(fn () => $client->createConversation(
            subject: str_repeat('x', 301),
            participants: [Env::get('OTHER_USER_ID'), ''],
        ));
        $this->assertSame([400, ApiError::VALIDATION_FAILED], [$e->status, $e->code()]);
        $fields = array_map(static fn ($f) => $f->field, $e->fieldErrors);
        sort($fields);
        $this->assertSame(['participants[1]', 'subject'], $fields);
        foreach ($e->fieldErrors as $f) {
            $this->assertNotSame('', $f->reason);
        }
        $this->assertStringContainsString('participants[1]', $e->getMessage());
        $this->assertNull($e->retryAfter);
    }

    public function test400OfAQueryParameter(): void
    {
        $client = Env::userClient();
        $e = self::apiError(fn () => $client->conversations(limit: 0)->current());
        $this->assertSame([400, ApiError::VALIDATION_FAILED], [$e->status, $e->code()]);
        $this->assertSame(['limit'], array_map(static fn ($f) => $f->field, $e->fieldErrors));
    }

    public function test401WrongCredentials(): void
    {
        $wrong = 'not-' . Env::get('OTHER_PASSWORD');
        $e = self::apiError(fn () => Env::userClient('OTHER_', password: $wrong)->listDefinitions());
        $this->assertSame([401, ApiError::INVALID_CREDENTIALS], [$e->status, $e->code()]);
        $this->assertNotSame('', $e->requestId);
        $this->assertStringNotContainsString($wrong, (string) $e);
    }

    public function test404UnknownAndForeignConversations(): void
    {
        $client = Env::userClient();
        $e = self::apiError(fn () => $client->getConversation('cnv_does_not_exist'));
        $this->assertSame([404, ApiError::NOT_FOUND], [$e->status, $e->code()]);
        $this->assertSame('/v1/conversations/cnv_does_not_exist', $e->path);

        // A conversation of the account in which the caller takes no part
        // does not exist for them.
        $theirs = Env::userClient('OTHER_')->createConversation(subject: 'not yours');
        $e = self::apiError(fn () => $client->getConversation($theirs['id']));
        $this->assertSame(404, $e->status);
    }

    public function test429CarriesRetryAfter(): void
    {
        $statuses = [];
        $locked = null;
        for ($i = 0; $i < 10 && $locked === null; $i++) {
            $e = self::apiError(
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
        $e = self::apiError(fn () => Env::userClient('LOCKOUT_')->login());
        $this->assertSame(429, $e->status);
    }

    /**
     * The client never redacts by replacing text (which mangled "… password
     * is wrong." into "… is [redacted]." for the password "wrong", or every
     * "e" for the password "e"): secrets stay out of its errors because it
     * never puts them there.
     */
    public function testOneLetterAndCommonWordPasswordsLeaveTheMessageIntact(): void
    {
        // Users that do not exist: every failed login gets the same answer,
        // and none of them is a user the suite needs.
        [$status, $body] = Env::rawPost(Env::get('ACCOUNT_URL') . '/login', [
            'username' => 'nobody-' . bin2hex(random_bytes(8)),
            'password' => 'x',
            'accountName' => Env::get('ACCOUNT_NAME'),
        ]);
        $this->assertSame(401, $status);
        $detail = json_decode($body, true, 512, JSON_THROW_ON_ERROR)['detail'];
        $unusual = 'Zq-' . bin2hex(random_bytes(8));
        foreach (['e', 'is', 'wrong', 'password', $unusual] as $password) {
            $client = new Client(
                accountUrl: Env::get('ACCOUNT_URL'),
                username: 'nobody-' . bin2hex(random_bytes(8)),
                password: $password,
                accountName: Env::get('ACCOUNT_NAME'),
            );
            $e = self::apiError(fn () => $client->login());
            $this->assertSame([401, ApiError::INVALID_CREDENTIALS], [$e->status, $e->code()]);
            $this->assertSame($detail, $e->detail, "password $password");
            $this->assertSame(
                "acme/platform: POST /login: 401 invalid_credentials: $detail [request id {$e->requestId}]",
                $e->getMessage(),
            );
            $this->assertStringNotContainsString('[redacted]', $e->getMessage() . print_r($e, true));
        }
        $this->assertStringNotContainsString($unusual, $e->getMessage() . print_r($e, true));
    }

    public function testAConstantForEveryCodeOfDocsErrorsMd(): void
    {
        $doc = (string) file_get_contents(__DIR__ . '/../../../docs/errors.md');
        preg_match_all('/^\| *\d{3} *\| *`([a-z_]+)`/m', $doc, $m);
        $this->assertGreaterThan(5, count($m[1]), 'docs/errors.md lists the codes in a table');
        $constants = (new \ReflectionClass(ApiError::class))->getConstants();
        foreach ($m[1] as $code) {
            $this->assertSame($code, $constants[strtoupper($code)] ?? null, $code);
        }
    }
}
