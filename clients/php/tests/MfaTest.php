<?php

declare(strict_types=1);

namespace Acme\Platform\Tests;

use Acme\Platform\ApiError;
use Acme\Platform\Client;
use Acme\Platform\MfaRequiredError;
use Acme\Platform\Tests\Support\Env;
use Acme\Platform\Tests\Support\ServiceTestCase;

/**
 * A second factor against the real services: a user enrols a TOTP (codes
 * computed here with hash_hmac, an implementation of RFC 6238 of its
 * own), a login without a code throws MfaRequiredError, one with a code or
 * a recovery code succeeds, a code is not accepted twice, and a backend's
 * reset lets the user sign in with the password alone.
 */
final class MfaTest extends ServiceTestCase
{
    /** The code of $secret (base32) $steps 30-second steps from now. */
    private static function totp(string $secret, int $steps = 0): string
    {
        $alphabet = 'ABCDEFGHIJKLMNOPQRSTUVWXYZ234567';
        $bits = '';
        foreach (str_split(rtrim($secret, '=')) as $ch) {
            $bits .= str_pad(decbin((int) strpos($alphabet, $ch)), 5, '0', STR_PAD_LEFT);
        }
        $key = '';
        foreach (str_split(substr($bits, 0, intdiv(strlen($bits), 8) * 8), 8) as $byte) {
            $key .= chr((int) bindec($byte));
        }
        $counter = pack('J', intdiv(time(), 30) + $steps);
        $mac = hash_hmac('sha1', $counter, $key, true);
        $offset = ord($mac[19]) & 0x0f;
        $value = unpack('N', substr($mac, $offset, 4))[1] & 0x7fffffff;
        return str_pad((string) ($value % 1000000), 6, '0', STR_PAD_LEFT);
    }

    private static function user(string $username, string $password): Client
    {
        return new Client(
            accountUrl: Env::get('ACCOUNT_URL'),
            username: $username,
            password: $password,
            accountName: Env::get('ACCOUNT_NAME'),
        );
    }

    public function testAUserEnrolsASecondFactorAndSignsInWithIt(): void
    {
        $backend = Env::serviceClient();
        $password = 'pw-' . bin2hex(random_bytes(16));
        $created = $backend->createUser('php-mfa', $password);
        $me = self::user('php-mfa', $password);

        $enrolment = $me->enrollTotp();
        $this->assertStringStartsWith('otpauth://totp/', $enrolment['otpauthUri']);
        $this->assertStringContainsString('secret=' . $enrolment['secret'], $enrolment['otpauthUri']);
        $wrong = self::apiError(static fn () => $me->verifyTotp('000000x'));
        $this->assertSame(ApiError::INVALID_OTP, $wrong->code());
        // The activation uses the current step and the login the next:
        // neither is two steps old if the clock crosses a step meanwhile.
        $recovery = $me->verifyTotp(self::totp($enrolment['secret'], 0));
        $this->assertCount(10, $recovery);
        $this->assertSame(['totp'], $me->userInfo()['mfa']);
        $this->assertSame(['totp'], $backend->getUser($created['id'])['mfa']);

        $again = self::user('php-mfa', $password);
        $required = self::apiError(static fn () => $again->login());
        $this->assertInstanceOf(MfaRequiredError::class, $required);
        $this->assertSame([401, ApiError::MFA_REQUIRED], [$required->status, $required->code()]);
        $code = self::totp($enrolment['secret'], 1);
        $again->loginWithOtp($code);
        $this->assertSame($created['id'], $again->userInfo()['sub']);

        $third = self::user('php-mfa', $password);
        $replay = self::apiError(static fn () => $third->loginWithOtp($code));
        $this->assertSame(ApiError::INVALID_CREDENTIALS, $replay->code());
        $third->loginWithOtp($recovery[0]);
        $spent = self::apiError(static fn () => self::user('php-mfa', $password)->loginWithOtp($recovery[0]));
        $this->assertSame(ApiError::INVALID_CREDENTIALS, $spent->code());
        $change = self::apiError(static fn () => $third->changePassword($password, 'pw-' . bin2hex(random_bytes(16))));
        $this->assertInstanceOf(MfaRequiredError::class, $change);
        $this->assertSame(403, $change->status);
        $wrongPassword = self::apiError(static fn () => $third->removeTotp(password: 'not-the-password'));
        $this->assertSame(ApiError::INVALID_CURRENT_PASSWORD, $wrongPassword->code());

        $backend->resetUserMfa($created['id']);
        $fresh = self::user('php-mfa', $password);
        $fresh->login();
        $this->assertSame([], $fresh->userInfo()['mfa']);
        $second = $fresh->enrollTotp();
        $fresh->verifyTotp(self::totp($second['secret'], 0));
        $fresh->removeTotp(code: self::totp($second['secret'], 1));
        $this->assertSame([], $fresh->userInfo()['mfa']);
        $backend->deleteUser($created['id']);
    }
}
