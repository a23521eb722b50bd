# A Perl workload of known construction, profiled from outside.
#
# pl_split.pl SECONDS MODE prints "ready", then for SECONDS:
#   split    Work::outer calls hot_a three times for each call of hot_b,
#            each the same work: hot_a 75 %, hot_b 25 %, outer 100 %
#            inclusive
#   recurse  Work::deep recurses 5 levels down to hot_a: deep 100 %
#            inclusive, counted once per sample
#   xs       Work::digest calls Digest::MD5::md5 (XS) on a large string:
#            its native code under it
#   sort     Work::sorter sorts with a block (run by pp_sort's own run
#            loop) that calls Work::by_value, which does hot_a's work
#   sleep    Work::napper sleeps in select() most of the time
#   threads  a second interpreter (ithreads) runs Work::right while the
#            main one runs Work::left
use strict;
use warnings;
use Time::HiRes qw(clock_gettime CLOCK_MONOTONIC);
use Digest::MD5 qw(md5);

package Work;

my $finish;

sub now { Time::HiRes::clock_gettime(Time::HiRes::CLOCK_MONOTONIC()) }

sub hot_a {
    my ($n) = @_;
    my $s = 0;
    for (my $i = 0; $i < $n; $i++) {
        $s += $i * $i;
    }
    return $s;
}

sub hot_b {
    my ($n) = @_;
    my $s = 0;
    for (my $i = 0; $i < $n; $i++) {
        $s += $i * $i;
    }
    return $s;
}

sub outer {
    while (now() < $finish) {
        hot_a(3000);
        hot_a(3000);
        hot_a(3000);
        hot_b(3000);
    }
}

sub deep {
    my ($n) = @_;
    return hot_a(3000) if $n == 0;
    return deep($n - 1);
}

sub recurse {
    deep(5) while now() < $finish;
}

sub digest {
    my $data = join('', map { chr } 0 .. 255) x 65536;
    Digest::MD5::md5($data) while now() < $finish;
}

sub by_value {
    my ($x, $y) = @_;
    hot_a(300);
    return $x <=> $y;
}

sub sorter {
    my @list = map { ($_ * 7919) % 1000 } 1 .. 200;
    while (now() < $finish) {
        my @sorted = sort { by_value($a, $b) } @list;
    }
}

sub napper {
    while (now() < $finish) {
        select(undef, undef, undef, 0.05);
        hot_a(300);
    }
}

sub left {
    hot_a(3000) while now() < $finish;
}

sub right {
    hot_b(3000) while now() < $finish;
}

package main;

my ($seconds, $mode) = @ARGV;
$finish = Work::now() + $seconds;
$| = 1;
print "ready\n";
if ($mode eq 'split') { Work::outer() }
elsif ($mode eq 'recurse') { Work::recurse() }
elsif ($mode eq 'xs') { Work::digest() }
elsif ($mode eq 'sort') { Work::sorter() }
elsif ($mode eq 'sleep') { Work::napper() }
elsif ($mode eq 'threads') {
    require threads;
    my $other = threads->create(sub { Work::right() });
    Work::left();
    $other->join;
}
else { die "unknown mode $mode\n" }
