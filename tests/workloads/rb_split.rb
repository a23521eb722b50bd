# A Ruby workload of known construction, profiled from outside.
#
# rb_split.rb SECONDS MODE prints "ready", then for SECONDS:
#   split      Work#outer calls hot_a three times for each call of hot_b,
#              each the same work: hot_a 75 %, hot_b 25 %, outer 100 %
#              inclusive
#   recurse    Work#deep recurses 5 levels down to hot_a: deep 100 %
#              inclusive, counted once per sample
#   threads    two threads, Work#left and Work#right, each its own loop
#   zlib       Work#squeeze calls Zlib::Deflate.deflate: libz's native code
#              under it
#   sleep      Work#napper sleeps in Kernel#sleep most of the time
#   enumerator Work#consume takes values from an external Enumerator (run
#              by a Fiber) whose block, in Work#produce, calls hot_a
require 'zlib'

class Work
  def initialize(seconds)
    @finish = now + seconds
  end

  def now
    Process.clock_gettime(Process::CLOCK_MONOTONIC)
  end

  def hot_a(n)
    s = 0
    i = 0
    while i < n
      s += i * i
      i += 1
    end
    s
  end

  def hot_b(n)
    s = 0
    i = 0
    while i < n
      s += i * i
      i += 1
    end
    s
  end

  def outer
    while now < @finish
      hot_a(3000)
      hot_a(3000)
      hot_a(3000)
      hot_b(3000)
    end
  end

  def deep(n)
    return hot_a(3000) if n == 0
    deep(n - 1)
  end

  def recurse
    deep(5) while now < @finish
  end

  def left
    hot_a(3000) while now < @finish
  end

  def right
    hot_b(3000) while now < @finish
  end

  def squeeze
    data = (0..255).map(&:chr).join * 4096
    Zlib::Deflate.deflate(data, 6) while now < @finish
  end

  def napper
    while now < @finish
      sleep 0.05
      hot_a(300)
    end
  end

  def produce
    Enumerator.new do |y|
      loop { y << hot_a(3000) }
    end
  end

  def consume
    values = produce
    values.next while now < @finish
  end
end

seconds = Float(ARGV[0])
mode = ARGV[1]
work = Work.new(seconds)
$stdout.puts 'ready'
$stdout.flush
case mode
when 'split' then work.outer
when 'recurse' then work.recurse
when 'threads'
  other = Thread.new { work.right }
  work.left
  other.join
when 'zlib' then work.squeeze
when 'sleep' then work.napper
when 'enumerator' then work.consume
end
