<?php

declare(strict_types=1);

namespace Acme\Platform\Tests\Support;

use Acme\Platform\Client;
use Acme\Platform\TokenStore;
use PHPUnit\Framework\Assert;

/**
 * The endpoints and credentials of the suite, from the environment that
 * deploy/clientstest sets (see its doc.go): ACME_TEST_ACCOUNT_URL,
 * ACME_TEST_CONVERSATIONS_URL, ACME_TEST_ACCOUNT_NAME, ACME_TEST_USERNAME,
 * ... A missing variable fails the test that needs it; nothing is skipped.
 */
final class Env
{
    public static function get(string $name): string
    {
        $value = getenv('ACME_TEST_' . $name);
        if ($value === false || $value === '') {
            Assert::fail("ACME_TEST_$name is not set: run this suite through deploy/clientstest "
                . '(go test ./deploy/clientstest/...), which starts the services and sets it');
        }
        return $value;
    }

    /**
     * A client of the suite's user, or of the user of the prefix $who
     * ("OTHER_", "LOCKOUT_").
     */
    public static function userClient(
        string $who = '',
        ?TokenStore $tokenStore = null,
        ?string $conversationsUrl = null,
        ?string $password = null,
        ?callable $logger = null,
    ): Client {
        return new Client(
            accountUrl: self::get('ACCOUNT_URL'),
            conversationsUrl: $conversationsUrl ?? self::get('CONVERSATIONS_URL'),
            username: self::get($who . 'USERNAME'),
            password: $password ?? self::get($who . 'PASSWORD'),
            accountName: self::get('ACCOUNT_NAME'),
            tokenStore: $tokenStore,
            logger: $logger,
        );
    }

    public static function serviceClient(?callable $logger = null): Client
    {
        return new Client(
            accountUrl: self::get('ACCOUNT_URL'),
            conversationsUrl: self::get('CONVERSATIONS_URL'),
            clientId: self::get('CLIENT_ID'),
            clientSecret: self::get('CLIENT_SECRET'),
            logger: $logger,
        );
    }

    /**
     * A plain JSON POST, outside the library: the tests use it to get and
     * revoke token sets behind the library's back.
     *
     * @param array<string, mixed> $body
     * @return array{0: int, 1: string}
     */
    public static function rawPost(string $url, array $body): array
    {
        $handle = curl_init($url);
        curl_setopt_array($handle, [
            CURLOPT_POST => true,
            CURLOPT_POSTFIELDS => json_encode($body, JSON_THROW_ON_ERROR),
            CURLOPT_HTTPHEADER => ['Content-Type: application/json'],
            CURLOPT_RETURNTRANSFER => true,
            // No timeout of its own: a loaded machine may take any time;
            // the suite runner's deadline bounds a hang.
            CURLOPT_TIMEOUT => 0,
        ]);
        $out = curl_exec($handle);
        $status = (int) curl_getinfo($handle, CURLINFO_RESPONSE_CODE);
        curl_close($handle);
        return [$status, is_string($out) ? $out : ''];
    }

    /** @return array{id_token: string, refresh_token: string, expires_in: int} a token set of the suite's user */
    public static function rawLogin(): array
    {
        [$status, $body] = self::rawPost(self::get('ACCOUNT_URL') . '/login', [
            'username' => self::get('USERNAME'),
            'password' => self::get('PASSWORD'),
            'accountName' => self::get('ACCOUNT_NAME'),
        ]);
        Assert::assertSame(200, $status, 'POST /login');
        return json_decode($body, true, 512, JSON_THROW_ON_ERROR)['tokens'];
    }

    /** Parses an RFC 3339 UTC timestamp of the services into microseconds since the epoch. */
    public static function micros(string $timestamp): int
    {
        $parsed = \DateTimeImmutable::createFromFormat('Y-m-d\TH:i:s.uP', preg_replace_callback(
            '/^(.{19})(?:\.(\d+))?Z$/',
            static fn (array $m): string => $m[1] . '.' . str_pad(substr($m[2] ?? '', 0, 6), 6, '0') . '+00:00',
            $timestamp,
        ) ?? '');
        Assert::assertNotFalse($parsed, "timestamp $timestamp");
        return (int) $parsed->format('Uu');
    }
}
