/*
 * names: C++ functions whose demangled names are long, for the short names
 * of tables and for naming a function by a part of its name.
 *
 * main → map_work<unsigned long> → {Table<…>::lookup 25 %,
 * Table<…>::update 75 %}, where Table is a class template instantiated with
 * a string key and a vector of maps: both methods' names run to hundreds of
 * characters and differ only after the template arguments.
 *
 * Usage: names_cpp SECONDS [--ready]
 */
#include <map>
#include <string>
#include <vector>

#include "workload.h"

#define N 1000000UL

namespace app {
template <typename Key, typename Value> struct Table {
	__attribute__((noinline)) void lookup(const Key &key, unsigned long n) const
	{
		(void)key;
		SPIN(n);
	}

	__attribute__((noinline)) void update(const Key &key, const Value &value, unsigned long n)
	{
		(void)key;
		(void)value;
		SPIN(n);
	}
};
} // namespace app

typedef app::Table<std::string, std::vector<std::map<int, long> > > Table;

template <typename T>
__attribute__((noinline)) void map_work(Table &table, const std::string &key, T n)
{
	static const std::vector<std::map<int, long> > value;

	table.lookup(key, n);
	table.update(key, value, 3 * n);
	sink++;
}

int main(int argc, char **argv)
{
	double deadline = start(argc, argv);
	Table table;
	std::string key("key");

	while (now_s() < deadline)
		map_work<unsigned long>(table, key, vary(N));
	return 0;
}
