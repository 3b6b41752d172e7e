<?php

declare(strict_types=1);

// The suite runs without `composer install`: Debian's phpunit provides
// PHPUnit, and this registers the PSR-4 autoloading that composer.json
// declares (Acme\Platform\ => src/, Acme\Platform\Tests\ => tests/). With a
// Composer install, vendor/autoload.php does the same.
if (is_file(__DIR__ . '/../vendor/autoload.php')) {
    require __DIR__ . '/../vendor/autoload.php';
    return;
}

spl_autoload_register(static function (string $class): void {
    $prefixes = [
        'Acme\\Platform\\Tests\\' => __DIR__ . '/',
        'Acme\\Platform\\' => __DIR__ . '/../src/',
    ];
    foreach ($prefixes as $prefix => $dir) {
        if (str_starts_with($class, $prefix)) {
            $file = $dir . str_replace('\\', '/', substr($class, strlen($prefix))) . '.php';
            if (is_file($file)) {
                require $file;
            }
            return;
        }
    }
});
