<?php

declare(strict_types=1);

namespace Acme\Platform\Tests;

use Acme\Platform\ApiError;
use Acme\Platform\Client;
use Acme\Platform\MemoryTokenStore;
use Acme\Platform\Secret;
use Acme\Platform\Session;
use Acme\Platform\Tests\Support\Env;
use Acme\Platform\Tests\Support\ServiceTestCase;

/**
 * Logging in, client credentials, renewal and the secrecy of secrets.
 */
final class SessionTest extends ServiceTestCase
{
    /** A session made of a real token set, which the client must renew at once. */
    private static function expiredSession(array $tokens): Session
    {
        return new Session(
            new Secret($tokens['id_token']),
            new Secret($tokens['refresh_token']),
            microtime(true) - 1,
            (float) $tokens['expires_in'],
        );
    }

    public function testLoginThenCallsUseTheSession(): void
    {
        $client = Env::userClient(logger: $this->logger);
        $client->login();
        $this->assertSame(1, $this->logCount('logged in'));
        $names = array_column($client->listDefinitions(), 'name');
        $this->assertSame([Env::get('DEFINITION_NAME')], $names);
        $this->assertSame(1, $this->logCount('logged in'), 'a fresh session is used, not renewed');
    }

    public function testFirstCallLogsInByItself(): void
    {
        $client = Env::userClient(logger: $this->logger);
        $this->assertIsArray($client->listDefinitions());
        $this->assertSame(1, $this->logCount('logged in'));
    }

    public function testWrongPasswordIsInvalidCredentialsWithoutThePassword(): void
    {
        $wrong = 'Wr0ng-' . strrev(Env::get('PASSWORD'));
        $client = Env::userClient('OTHER_', password: $wrong, logger: $this->logger);
        try {
            $client->login();
            $this->fail('no ApiError');
        } catch (ApiError $e) {
            $this->assertSame([401, ApiError::INVALID_CREDENTIALS], [$e->status, $e->code()]);
            $this->assertSame(['POST', '/login'], [$e->method, $e->path]);
            // zend.exception_ignore_args is off (phpunit.xml.dist): traces carry arguments.
            foreach ([(string) $e, print_r($e, true), print_r($e->getTrace(), true), print_r($client, true)] as $text) {
                $this->assertStringNotContainsString($wrong, $text);
            }
        }
        // The right password still works: one failure locks nothing.
        Env::userClient('OTHER_')->login();
    }

    public function testServiceClientReadsDefinitions(): void
    {
        $client = Env::serviceClient($this->logger);
        $client->login();
        $this->assertSame(1, $this->logCount('obtained an access token with client credentials'));
        $this->assertSame([Env::get('DEFINITION_TYPE')], array_column($client->listDefinitions(), 'type'));
    }

    public function testServiceClientWritesConversationsItTakesNoPartIn(): void
    {
        $client = Env::serviceClient($this->logger);
        $created = $client->createConversation(subject: 'from a backend', participants: [Env::get('USER_ID')]);
        $this->assertSame([Env::get('USER_ID')], $created['participants']);
        $this->assertSame('from a backend', Env::userClient()->getConversation($created['id'])['subject']);
        $ids = array_column(iterator_to_array($client->conversations(limit: 100), false), 'id');
        $this->assertContains($created['id'], $ids);
        $message = $client->postMessage($created['id'], 'hello from a backend');
        $this->assertSame(Env::get('CLIENT_ID'), $message['author']);
    }

    public function testWrongClientSecretIsRefusedWithoutTheSecret(): void
    {
        $wrong = 'cs_' . str_repeat('0', 43);
        $client = new Client(
            accountUrl: Env::get('ACCOUNT_URL'),
            clientId: Env::get('CLIENT_ID'),
            clientSecret: $wrong,
        );
        try {
            $client->login();
            $this->fail('no ApiError');
        } catch (ApiError $e) {
            $this->assertSame([401, 'invalid_client'], [$e->status, $e->code()]);
            foreach ([(string) $e, print_r($e, true), print_r($e->getTrace(), true), print_r($client, true)] as $text) {
                $this->assertStringNotContainsString($wrong, $text);
                $this->assertStringNotContainsString(Env::get('CLIENT_SECRET'), $text);
            }
        }
    }

    public function testServiceClientRenewsItsToken(): void
    {
        $client = Env::serviceClient($this->logger);
        $client->listDefinitions();
        usleep((int) ((float) Env::get('TOKEN_TTL') * 1e6)); // past the renewal time of the access token
        $client->listDefinitions();
        $this->assertSame(2, $this->logCount('obtained an access token with client credentials'));
    }

    public function testRenewsByRefreshBeforeExpiry(): void
    {
        $store = new MemoryTokenStore();
        $client = Env::userClient(tokenStore: $store, logger: $this->logger);
        $client->listDefinitions();
        $first = $store->load();
        $this->assertNotNull($first);
        $this->assertSame((float) Env::get('TOKEN_TTL'), $first->lifetime);
        usleep(max(0, (int) (($first->renewAt() - microtime(true) + 0.1) * 1e6)));
        $client->listDefinitions();
        $second = $store->load();
        $this->assertSame(1, $this->logCount('session renewed by refresh'));
        $this->assertSame(1, $this->logCount('logged in'), 'renewal refreshes, it does not log in again');
        $this->assertNotSame($first->bearer->reveal(), $second->bearer->reveal());
        $this->assertGreaterThan($first->expiresAt, $second->expiresAt);
        array_push($this->extraSecrets, $first->bearer->reveal(), $second->bearer->reveal());
    }

    public function testLogsInAgainWhenRefreshIsRefused(): void
    {
        $tokens = Env::rawLogin();
        [$status] = Env::rawPost(Env::get('ACCOUNT_URL') . '/logout', ['refresh_token' => $tokens['refresh_token']]);
        $this->assertSame(204, $status);
        $store = new MemoryTokenStore(self::expiredSession($tokens));
        $client = Env::userClient(tokenStore: $store, logger: $this->logger);
        $this->assertSame([Env::get('DEFINITION_NAME')], array_column($client->listDefinitions(), 'name'));
        $this->assertSame(1, $this->logCount('refresh refused (401 invalid_token); logging in again'));
        $this->assertSame(1, $this->logCount('logged in'));
        $renewed = $store->load();
        $this->assertNotNull($renewed?->refreshToken);
        $this->assertNotSame($tokens['refresh_token'], $renewed->refreshToken->reveal());
        array_push($this->extraSecrets, $tokens['id_token'], $tokens['refresh_token']);
    }

    public function testARefusedBearerRenewsTheSessionAndTheCallGoesThrough(): void
    {
        // The service refuses a bearer the client still believes valid (as
        // after a key rotation): 401 invalid_token, then one renewal and one
        // more attempt.
        $tokens = Env::rawLogin();
        $unusable = new Session(
            new Secret('not-a-token'),
            new Secret($tokens['refresh_token']),
            microtime(true) + 3600,
            3600.0,
        );
        $client = Env::userClient(tokenStore: new MemoryTokenStore($unusable), logger: $this->logger);
        $this->assertSame([Env::get('DEFINITION_NAME')], array_column($client->listDefinitions(), 'name'));
        $this->assertSame(1, $this->logCount('session renewed by refresh'));
        array_push($this->extraSecrets, $tokens['id_token'], $tokens['refresh_token']);
    }

    public function testAnExpiredSessionIsRenewedOnceThenReused(): void
    {
        $tokens = Env::rawLogin();
        $store = new MemoryTokenStore(self::expiredSession($tokens));
        $client = Env::userClient(tokenStore: $store, logger: $this->logger);
        $client->listDefinitions();
        $client->listDefinitions();
        $this->assertSame(1, $this->logCount('session renewed by refresh'));
        $this->assertSame(0, $this->logCount('logged in'));
        array_push($this->extraSecrets, $tokens['id_token'], $tokens['refresh_token']);
    }

    public function testLogoutRevokesTheSession(): void
    {
        $store = new MemoryTokenStore();
        $client = Env::userClient(tokenStore: $store, logger: $this->logger);
        $client->login();
        $refresh = $store->load()?->refreshToken?->reveal();
        $this->assertNotNull($refresh);
        $client->logout();
        $this->assertNull($store->load());
        [$status] = Env::rawPost(Env::get('ACCOUNT_URL') . '/token/refresh', ['refresh_token' => $refresh]);
        $this->assertSame(401, $status, 'the refresh token of a logged-out session is refused');
        $client->listDefinitions();
        $this->assertSame(2, $this->logCount('logged in'));
    }

    public function testNoStringFormShowsASecret(): void
    {
        $store = new MemoryTokenStore();
        $users = Env::userClient(tokenStore: $store);
        $users->login();
        $session = $store->load();
        $services = Env::serviceClient();
        $secrets = [
            Env::get('PASSWORD'),
            Env::get('CLIENT_SECRET'),
            $session->bearer->reveal(),
            $session->refreshToken->reveal(),
        ];
        $forms = [];
        foreach ([$users, $services, $store, $session, $session->bearer] as $thing) {
            ob_start();
            var_dump($thing);
            $forms[] = (string) ob_get_clean();
            $forms[] = print_r($thing, true);
            $forms[] = var_export($thing, true);
            $forms[] = json_encode($thing);
        }
        $forms[] = (string) $session->bearer;
        foreach ($forms as $form) {
            foreach ($secrets as $secret) {
                $this->assertStringNotContainsString($secret, $form);
            }
        }
        foreach ([$users, $session->bearer] as $thing) {
            try {
                serialize($thing);
                $this->fail('serialized ' . get_class($thing));
            } catch (\LogicException) {
                $this->addToAssertionCount(1);
            }
        }
    }
}
