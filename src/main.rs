fn main() {
    println!("agdx");
}
