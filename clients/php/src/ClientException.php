<?php

declare(strict_types=1);

namespace Acme\Platform;

/**
 * Base class of every exception this package throws: catch it to catch
 * them all.
 */
class ClientException extends \RuntimeException
{
}
