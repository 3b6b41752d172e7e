<?php

declare(strict_types=1);

namespace Acme\Platform;

/**
 * The user has a second factor: sign in again with a code of it
 * (Client::loginWithOtp()). A 401 of POST /login (a 403 of
 * Client::changePassword() without $otp); it never tells whether the
 * password was right.
 */
final class MfaRequiredError extends ApiError
{
}
