{
  "payloadType": "application/vnd.in-toto+json",
  "payload": "eyJfdHlwZSI6Imh0dHBzOi8vaW4tdG90by5pby9TdGF0ZW1lbnQvdjEiLCJwcmVkaWNhdGUiOnsia2l0IjoibWFuaWZlc3QifSwicHJlZGljYXRlVHlwZSI6InVybjpraXQ6bWFuaWZlc3QtYXBwcm92YWw6MSIsInN1YmplY3QiOlt7ImRpZ2VzdCI6eyJzaGEyNTYiOiJlZTEzNWE3MTIzNjEwZDUzMzNjNmMxNGNjM2Q0MDg3YTdhZDY3MTNmNDY0YzQwMmZkM2ZhMzE5YWVhNmE4YTgxIn0sIm5hbWUiOiJ0cmFuc2Zvcm1lcnMtY3B1LnlhbWwifV19",
  "signatures": [
    {
      "keyid": "SHA256:+7JblY1FdA9i3H5v5xHFp5RlvuS2IFBmP4Kwmrl738s",
      "sig": "i1+erRsLfjNv8PWdosGnMFyqn1x4+B8gqGoW0IIle8qMKpPrwINaHtdff2Gg/UT1yp6B/GfiX+Aqustz6hYsDQ==",
      "publicKey": "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIE3lKu2Eaqir5Wi+R44pDwEuDfFJHlGGFKEXqIYwyP52 kit-example"
    }
  ]
}
