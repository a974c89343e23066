// process_role(): what a process does in its tree, from the titles real servers set (as
// captured from nginx 1.22, PostgreSQL 15, gunicorn 20 and php-fpm 8.2 on Debian 12).
#include <catch2/catch.hpp>

#include "engine/process_tree.h"

using qscope::process_role;

TEST_CASE("process roles from server titles", "[tree]") {
    CHECK(process_role("nginx", "nginx: master process /usr/sbin/nginx -c /tmp/x/nginx.conf -p /tmp/x", true) ==
          "master process");
    CHECK(process_role("nginx", "nginx: master process nginx -c /tmp/x/nginx.conf", true) == "master process");
    CHECK(process_role("nginx", "nginx: worker process", false) == "worker process");
    CHECK(process_role("nginx", "nginx: cache manager process", false) == "cache manager process");
    CHECK(process_role("postgres", "postgres: checkpointer", false) == "checkpointer");
    CHECK(process_role("postgres", "postgres: background writer", false) == "background writer");
    CHECK(process_role("postgres", "postgres: autovacuum launcher", false) == "autovacuum launcher");
    CHECK(process_role("postgres", "postgres: postgres postgres 127.0.0.1(52814) idle", false) == "client backend");
    CHECK(process_role("postgres", "postgres: app shop [local] SELECT", false) == "client backend");
    CHECK(process_role("postgres", "postgres: 15/main: app shop 10.0.0.7(40012) UPDATE waiting", false) ==
          "client backend");
    CHECK(process_role("postgres", "postgres: 15/main: walwriter", false) == "walwriter");
    CHECK(process_role("php-fpm8.2", "php-fpm: master process (/etc/php/8.2/fpm/php-fpm.conf)", true) ==
          "master process");
    CHECK(process_role("php-fpm8.2", "php-fpm: pool www", false) == "pool www");
    CHECK(process_role("gunicorn", "gunicorn: worker [app:app]", false) == "worker");
}

TEST_CASE("processes without a title are main or child", "[tree]") {
    CHECK(process_role("postgres", "/usr/lib/postgresql/15/bin/postgres -D /tmp/db", true) == "main");
    CHECK(process_role("gunicorn", "/usr/bin/python3 /usr/bin/gunicorn -w 3 app:app", false) == "child");
    CHECK(process_role("", "", false) == "child");
}
