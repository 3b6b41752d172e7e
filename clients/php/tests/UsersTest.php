<?php

declare(strict_types=1);

namespace Acme\Platform\Tests;

use Acme\Platform\ApiError;
use Acme\Platform\Client;
use Acme\Platform\MemoryTokenStore;
use Acme\Platform\Tests\Support\Env;
use Acme\Platform\Tests\Support\ServiceTestCase;

/**
 * Users by API and self-service: a backend (the suite's service
 * client, users:read and users:write) signs a user up, the user logs in
 * with the library, reads its userinfo and changes its password (the old
 * refresh token stops working), then the backend disables it (its login
 * fails) and erases it.
 */
final class UsersTest extends ServiceTestCase
{
    private static function password(): string
    {
        return 'pw-' . bin2hex(random_bytes(16));
    }

    private static function user(string $username, string $password, ?MemoryTokenStore $store = null): Client
    {
        return new Client(
            accountUrl: Env::get('ACCOUNT_URL'),
            username: $username,
            password: $password,
            accountName: Env::get('ACCOUNT_NAME'),
            tokenStore: $store,
        );
    }

    public function testABackendManagesAUserWhoServesItself(): void
    {
        $backend = Env::serviceClient();
        $first = self::password();
        $second = self::password();

        $weak = self::apiError(static fn () => $backend->createUser('php-signup', 'too-short'));
        $this->assertSame([400, ApiError::WEAK_PASSWORD], [$weak->status, $weak->code()]);
        $this->assertSame('password', $weak->fieldErrors[0]->field);

        $created = $backend->createUser('PHP-Signup', $first, name: 'Sign Up', email: 'signup@example.com');
        $this->assertSame('php-signup', $created['username']);
        $this->assertSame('Sign Up', $created['name']);
        $this->assertNull($created['lastLoginAt']);
        $taken = self::apiError(static fn () => $backend->createUser('php-signup', $second));
        $this->assertSame([409, ApiError::USERNAME_TAKEN], [$taken->status, $taken->code()]);
        $this->assertSame('signup@example.com', $backend->getUser($created['id'])['email']);
        $pages = iterator_to_array($backend->userPages(username: 'PHP-SIGNUP'), false);
        $this->assertSame([[$created['id']]], array_map(static fn ($p) => array_column($p->items, 'id'), $pages));
        $names = array_column(iterator_to_array($backend->users(limit: 1), false), 'username');
        $this->assertContains('php-signup', $names);
        $this->assertContains(Env::get('USERNAME'), $names);

        // The user logs in with the library and asks who it is.
        $store = new MemoryTokenStore();
        $me = self::user('php-signup', $first, $store);
        $info = $me->userInfo();
        $this->assertSame($created['id'], $info['sub']);
        $this->assertSame('php-signup', $info['preferred_username']);
        $this->assertSame('Sign Up', $info['name'] ?? null);
        $this->assertSame('signup@example.com', $info['email'] ?? null);
        $this->assertFalse($info['email_verified']);
        $this->assertSame(Env::get('ACCOUNT_NAME'), $info['account_name']);
        $oldRefresh = $store->load()?->refreshToken?->reveal();
        $this->assertNotNull($oldRefresh);

        $wrong = self::apiError(static fn () => $me->changePassword('not-the-current-one', $second));
        $this->assertSame([403, ApiError::INVALID_CURRENT_PASSWORD], [$wrong->status, $wrong->code()]);
        $me->changePassword($first, $second);
        // The client goes on with the new session; the old refresh token is dead.
        $this->assertSame($created['id'], $me->userInfo()['sub']);
        [$status] = Env::rawPost(Env::get('ACCOUNT_URL') . '/token/refresh', ['refresh_token' => $oldRefresh]);
        $this->assertSame(401, $status);
        $this->assertNotNull($backend->getUser($created['id'])['lastLoginAt']);

        // The backend disables the user: its login fails.
        $this->assertTrue($backend->updateUser($created['id'], ['disabled' => true])['disabled']);
        $refused = self::apiError(static fn () => self::user('php-signup', $second)->login());
        $this->assertSame(ApiError::INVALID_CREDENTIALS, $refused->code());

        $this->assertNull($backend->updateUser($created['id'], ['name' => null])['name']);
        $weakSet = self::apiError(static fn () => $backend->setUserPassword($created['id'], 'password'));
        $this->assertSame(ApiError::WEAK_PASSWORD, $weakSet->code());
        $backend->setUserPassword($created['id'], self::password());
        $backend->deleteUser($created['id']);
        $gone = self::apiError(static fn () => $backend->getUser($created['id']));
        $this->assertSame([404, ApiError::NOT_FOUND], [$gone->status, $gone->code()]);

        // A user's own token reaches no management call.
        $scope = self::apiError(static fn () => iterator_to_array(Env::userClient()->users()));
        $this->assertSame([403, ApiError::INSUFFICIENT_SCOPE], [$scope->status, $scope->code()]);
    }
}
